package main

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
)

// versionLine is what --version prints: the module's version, and the
// revision it was built from as the Go build info records it (go build
// in a git checkout; go install of a tagged version records no revision).
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "runclaim (no build information)"
	}
	return formatVersion(info)
}

// formatVersion is versionLine for info: "runclaim v1.2.3 (revision
// 0123abcd..., 2026-12-01T15:04:05Z, modified) go1.26.0".
func formatVersion(info *debug.BuildInfo) string {
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev []string
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if r := settings["vcs.revision"]; r != "" {
		rev = append(rev, "revision "+r)
	}
	if t := settings["vcs.time"]; t != "" {
		rev = append(rev, t)
	}
	if settings["vcs.modified"] == "true" {
		rev = append(rev, "modified")
	}
	line := "runclaim " + version
	if len(rev) > 0 {
		line += " (" + strings.Join(rev, ", ") + ")"
	}
	return fmt.Sprintf("%s %s", line, info.GoVersion)
}

// versionJSON is what --version --json prints: {"version", "revision",
// "time", "modified", "go"}, empty strings for what the build did not
// record.
func versionJSON() string {
	out := struct {
		Version  string `json:"version"`
		Revision string `json:"revision"`
		Time     string `json:"time"`
		Modified bool   `json:"modified"`
		Go       string `json:"go"`
	}{Version: "(devel)"}
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Version != "" {
			out.Version = info.Main.Version
		}
		out.Go = info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				out.Revision = s.Value
			case "vcs.time":
				out.Time = s.Value
			case "vcs.modified":
				out.Modified = s.Value == "true"
			}
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}
