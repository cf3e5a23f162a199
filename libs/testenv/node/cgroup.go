package node

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The node's processes and containers live under one cgroup of their own in every cgroup v1
// hierarchy (kubelet's cgroupRoot, and <root>/runtime for containerd, its shims, kubelet and
// kube-proxy), so that stopping the node can find every process it left, shims and containers
// included, whatever state it died in.
const cgroupFS = "/sys/fs/cgroup"

// hierarchies are the mounted cgroup v1 hierarchies (cpu, memory, pids, …).
func hierarchies() []string {
	entries, _ := os.ReadDir(cgroupFS)
	var hs []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "unified" {
			if _, err := os.Stat(filepath.Join(cgroupFS, e.Name(), "cgroup.procs")); err == nil {
				hs = append(hs, filepath.Join(cgroupFS, e.Name()))
			}
		}
	}
	return hs
}

// makeCgroup creates path in every hierarchy; in cpuset, each level takes its parent's CPUs and
// memory nodes (a new cpuset has none).
func makeCgroup(path string) error {
	for _, h := range hierarchies() {
		dir := h
		for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
				return err
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(parent, f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// joinCgroup moves pid into path in every hierarchy.
func joinCgroup(path string, pid int) error {
	for _, h := range hierarchies() {
		if err := os.WriteFile(filepath.Join(h, path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// killCgroup kills every process under path (freezing it first, so that none forks meanwhile)
// and removes its cgroups, deepest first.
func killCgroup(path string) {
	freezer := filepath.Join(cgroupFS, "freezer", path)
	if _, err := os.Stat(freezer); err != nil {
		return
	}
	_ = os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("FROZEN"), 0o644)
	for range 50 {
		pids := 0
		_ = filepath.WalkDir(freezer, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			raw, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(raw)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					pids++
				}
			}
			return nil
		})
		_ = os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("THAWED"), 0o644)
		if pids == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, h := range hierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, path), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}
