package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Series is one line of a plot: y against x.
type Series struct {
	Name string
	X, Y []float64
}

// WriteSVG draws the series as lines on logarithmic axes, with a legend:
// a plain SVG, no script, readable in a browser or on GitHub.
func WriteSVG(w io.Writer, title, xLabel, yLabel string, series []Series) error {
	const width, height, left, right, top, bottom = 720, 420, 80, 200, 40, 60
	minX, maxX, minY, maxY := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for i := range s.X {
			if s.X[i] <= 0 || s.Y[i] <= 0 {
				return fmt.Errorf("plot %q: a point (%v, %v) not positive, on log axes", s.Name, s.X[i], s.Y[i])
			}
			minX, maxX = math.Min(minX, s.X[i]), math.Max(maxX, s.X[i])
			minY, maxY = math.Min(minY, s.Y[i]), math.Max(maxY, s.Y[i])
		}
	}
	if math.IsInf(minX, 0) {
		return fmt.Errorf("plot %q: no points", title)
	}
	lx0, lx1 := math.Floor(math.Log10(minX)), math.Ceil(math.Log10(maxX))
	ly0, ly1 := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
	if lx1 == lx0 {
		lx1++
	}
	if ly1 == ly0 {
		ly1++
	}
	px := func(x float64) float64 {
		return left + (math.Log10(x)-lx0)/(lx1-lx0)*(width-left-right)
	}
	py := func(y float64) float64 {
		return height - bottom - (math.Log10(y)-ly0)/(ly1-ly0)*(height-top-bottom)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, escape(title))
	for e := lx0; e <= lx1; e++ {
		x := px(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			x, top, x, height-bottom, x, height-bottom+16, tickLabel(e))
	}
	for e := ly0; e <= ly1; e++ {
		y := py(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, y, width-right, y, left-6, y+4, tickLabel(e))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (left+width-right)/2, height-16, escape(xLabel))
	fmt.Fprintf(&b, `<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">%s</text>`+"\n", (top+height-bottom)/2, (top+height-bottom)/2, escape(yLabel))
	colors := []string{"#1f6feb", "#c62828", "#1a7f37", "#9a6700", "#8250df", "#555"}
	for i, s := range series {
		c := colors[i%len(colors)]
		var pts []string
		for j := range s.X {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j])))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(s.X[j]), py(s.Y[j]), c)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			width-right+12, top+10+i*18, width-right+32, top+10+i*18, c, width-right+38, top+14+i*18, escape(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func tickLabel(e float64) string {
	v := math.Pow(10, e)
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
