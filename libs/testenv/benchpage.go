package testenv

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

const benchHeader = `# Benchmarks

Written by ` + "`make bench`" + `: each service's benchmark rewrites its own section. Every figure is
from one run on one real control plane (etcd + kube-apiserver built from source); ratios compare
against a baseline measured in the same run, because these machines are noisy.
`

// Median is the middle value of xs (the upper one of an even count), xs left as it is: the figure
// benchmarks report from rounds, against one slow round.
func Median[T cmp.Ordered](xs []T) T {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// WriteBenchSection replaces one section of the benchmarks page at path (docs/benchmarks.md),
// between <!-- begin:name --> and <!-- end:name -->, adding it at the end when missing, so each
// service's benchmark can rewrite its own figures and leave the others'. body is Markdown; a line
// naming the machine and the time is put before it.
func WriteBenchSection(path, name, body string) error {
	page := benchHeader
	if raw, err := os.ReadFile(path); err == nil {
		page = string(raw)
	} else if !os.IsNotExist(err) {
		return err
	}
	host, _ := os.Hostname()
	section := fmt.Sprintf("<!-- begin:%s -->\n%s\n\n_Measured %s on %s (%d CPUs, %s, %s)._\n<!-- end:%s -->",
		name, strings.TrimSpace(body), time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), cpuModel(), runtime.Version(), name)
	begin, end := "<!-- begin:"+name+" -->", "<!-- end:"+name+" -->"
	i, j := strings.Index(page, begin), strings.Index(page, end)
	if i >= 0 && j > i {
		page = page[:i] + section + page[j+len(end):]
	} else {
		page = strings.TrimRight(page, "\n") + "\n\n" + section + "\n"
	}
	return os.WriteFile(path, []byte(page), 0o644)
}

func cpuModel() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "model name") {
			return strings.TrimSpace(line[strings.IndexByte(line, ':')+1:])
		}
	}
	return "unknown CPU"
}
