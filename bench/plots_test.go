package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

func hostInfo() string {
	return fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
}

// newPlot is a plot with its title, axis labels and the legend top left,
// where none of the curves start.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	return p
}

// latencyKeys lists the latency runs of r ("rate/mode/handler") in the order
// the report and the plot show them.
func (r *Results) latencyKeys() []string {
	keys := make([]string, 0, len(r.lat))
	for k := range r.lat {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return latOrder(keys[i]) < latOrder(keys[j]) })
	return keys
}

// plots draws the latency CDF and throughput against concurrency into dir
// and returns the files' names (relative to dir). Called with r.mu held.
func (r *Results) plots(t *testing.T, dir string) []string {
	var out []string
	if len(r.lat) > 0 {
		p := newPlot("2xx → handler latency (CDF)", "latency (ms, log scale)", "fraction of messages handled")
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		var lines []any
		for _, k := range r.latencyKeys() {
			s := r.lat[k]
			// At most 1,000 points per line: the CDF at evenly spaced ranks.
			step := max(1, len(s)/1000)
			pts := make(plotter.XYs, 0, len(s)/step+1)
			for i := 0; i < len(s); i += step {
				pts = append(pts, plotter.XY{X: msAtLeast1(s[i]), Y: float64(i+1) / float64(len(s))})
			}
			pts = append(pts, plotter.XY{X: msAtLeast1(s[len(s)-1]), Y: 1})
			rate, h, _ := strings.Cut(k, "/")
			lines = append(lines, rate+" msg/s, "+h, pts)
		}
		if err := plotutil.AddLines(p, lines...); err == nil && save(t, p, dir, "latency-cdf.png") {
			out = append(out, "latency-cdf.png")
		}
	}
	if len(r.curves) > 0 {
		p := newPlot("Throughput against concurrency", "clients", "transactions per second")
		var lines []any
		names := make([]string, 0, len(r.curves))
		for k := range r.curves {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			pts := make(plotter.XYs, len(r.curves[k]))
			for i, c := range r.curves[k] {
				pts[i] = plotter.XY{X: c[0], Y: c[1]}
			}
			lines = append(lines, k, pts)
		}
		if err := plotutil.AddLinePoints(p, lines...); err == nil && save(t, p, dir, "throughput-vs-clients.png") {
			out = append(out, "throughput-vs-clients.png")
		}
	}
	if len(r.scale) > 0 {
		p := newPlot("Time against table size", "size (rows, recipients or agents; log scale)", "time (ms, log scale)")
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		byWhat := map[string]plotter.XYs{}
		var order []string
		for _, s := range r.scale {
			if _, ok := byWhat[s.what]; !ok {
				order = append(order, s.what)
			}
			byWhat[s.what] = append(byWhat[s.what], plotter.XY{X: float64(s.size), Y: float64(s.took) / float64(time.Millisecond)})
		}
		var lines []any
		for _, w := range order {
			lines = append(lines, w, byWhat[w])
		}
		if err := plotutil.AddLinePoints(p, lines...); err == nil && save(t, p, dir, "scale.png") {
			out = append(out, "scale.png")
		}
	}
	return out
}

// msAtLeast1 is d in milliseconds, at least 1 (a log axis has no 0).
func msAtLeast1(d time.Duration) float64 {
	return max(1, float64(d)/float64(time.Millisecond))
}

func save(t *testing.T, p *plot.Plot, dir, name string) bool {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Log(err)
		return false
	}
	if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, filepath.Join(dir, name)); err != nil {
		t.Logf("plot %s: %v", name, err)
		return false
	}
	return true
}
