package main

import (
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
