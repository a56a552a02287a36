package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The scenario's timeline, as loadtest/runner.py plays it: each event at its at_s (in order;
// an event still running delays the next), each membership change opening a time-to-Stable
// measurement on the groups it touches.

func (r *run) groupList() []*group {
	r.gmu.Lock()
	defer r.gmu.Unlock()
	return slices.Clone(r.groups)
}

func (r *run) liveCount() int {
	n := 0
	for _, g := range r.groupList() {
		n += len(g.liveMembers())
	}
	return n
}

// addGroup: a new group (lt-<run id>-g<n>) with the scenario's members (not started) and its
// watcher.
func (r *run) addGroup() *group {
	r.gmu.Lock()
	index := r.groupSeq
	r.groupSeq++
	g := &group{name: fmt.Sprintf("lt-%s-g%d", r.runID, index), protocol: r.s.protocolOf(index)}
	for i := 0; i < r.s.Members; i++ {
		g.members = append(g.members, newMember(r, g, i, r.s.isStatic(i)))
	}
	r.groups = append(r.groups, g)
	r.gmu.Unlock()
	r.watchers.Add(1)
	go func() { defer r.watchers.Done(); r.watch(r.watchCtx, g) }()
	return g
}

// change opens a time-to-Stable measurement on the group.
func (r *run) change(g *group, kind string) {
	at := r.elapsed()
	g.mu.Lock()
	g.pending = append(g.pending, change{kind, at})
	g.mu.Unlock()
}

// startMembers starts members of one group, spread over ramp_s; the group is not observed
// Stable before the last of them has started.
func (r *run) startMembers(g *group, ms []*member, rampS float64) {
	g.mu.Lock()
	g.starting++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.starting--
		g.mu.Unlock()
	}()
	for n, m := range ms {
		m.start(r.ctx)
		if rampS > 0 && len(ms) > 1 {
			time.Sleep(time.Duration(rampS / float64(len(ms)) * float64(time.Second)))
		} else if n%200 == 199 {
			runtime.Gosched()
		}
	}
}

func (r *run) timeline() {
	events := slices.Clone(r.s.Events)
	sort.SliceStable(events, func(i, j int) bool { return events[i].AtS < events[j].AtS })
	for _, e := range events {
		if delay := e.AtS - r.elapsed(); delay > 0 {
			time.Sleep(time.Duration(delay * float64(time.Second)))
		}
		r.event(e)
	}
}

func (r *run) event(e Event) {
	started := r.elapsed()
	switch e.Kind {
	case "restart": // every group at once, its members one by one
		var wg sync.WaitGroup
		for _, g := range r.groupList() {
			wg.Add(1)
			go func() { defer wg.Done(); r.rolling(g, e) }()
		}
		wg.Wait()
	case "vanish":
		for _, g := range r.groupList() {
			live := g.liveMembers()
			for _, m := range live[:min(e.Count, len(live))] {
				m.vanish()
				r.change(g, "vanish")
			}
		}
	case "join":
		for _, g := range r.groupList() {
			g.mu.Lock()
			var added []*member
			for i := 0; i < e.Count; i++ {
				index := len(g.members) + i
				added = append(added, newMember(r, g, index, r.s.isStatic(index)))
			}
			g.members = append(g.members, added...)
			g.mu.Unlock()
			r.change(g, "join")
			r.startMembers(g, added, 0)
		}
	case "add_groups":
		for i := 0; i < e.Count; i++ {
			g := r.addGroup()
			r.change(g, "add_group")
			r.startMembers(g, g.memberList(), 0)
		}
	case "hook":
		r.hook(e)
	}
	r.mu.Lock()
	r.eventsRun = append(r.eventsRun, map[string]any{
		"kind": e.Kind, "at_s": round(started, 3), "done_s": round(r.elapsed(), 3)})
	r.mu.Unlock()
}

// rolling: count members of the group (0: all) leave and rejoin one by one, interval_s apart
// (a static member leaves with epoch -2 and rejoins with its instance id).
func (r *run) rolling(g *group, e Event) {
	live := g.liveMembers()
	n := e.Count
	if n == 0 || n > len(live) {
		n = len(live)
	}
	for _, m := range live[:n] {
		m.close()
		r.change(g, "leave")
		m.start(r.ctx)
		r.change(g, "rejoin")
		time.Sleep(time.Duration(e.IntervalS * float64(time.Second)))
	}
}

// hook runs the command named by the event with `sh -c` (skipped, and reported, when none was
// given), then opens a measurement on every group.
func (r *run) hook(e Event) {
	command := r.s.Hooks[e.Hook]
	entry := map[string]any{"name": e.Hook, "at_s": round(r.elapsed(), 3)}
	if command == "" {
		entry["skipped"] = "no command given (--hook NAME=COMMAND)"
		r.mu.Lock()
		r.hooksRun = append(r.hooksRun, entry)
		r.mu.Unlock()
		return
	}
	cmd := exec.Command("sh", "-c", command)
	cmd.Env = append(os.Environ(), "GROUPCOORD_LOADTEST_HOOK="+e.Hook,
		"GROUPCOORD_LOADTEST_TARGET="+strings.Join(r.router.targets, ","))
	t := time.Now()
	out, err := cmd.CombinedOutput()
	rc := -1
	if ps := cmd.ProcessState; ps != nil {
		rc = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			rc = -int(ws.Signal()) // as Python reports a signalled child
		}
	} else if err != nil {
		out = append(out, []byte(err.Error())...)
	}
	text := strings.ToValidUTF8(string(out), "\uFFFD")
	if len(text) > 2000 {
		text = text[len(text)-2000:]
	}
	entry["command"] = command
	entry["returncode"] = rc
	entry["seconds"] = round(time.Since(t).Seconds(), 3)
	entry["output"] = text
	r.mu.Lock()
	r.hooksRun = append(r.hooksRun, entry)
	r.mu.Unlock()
	for _, g := range r.groupList() {
		r.change(g, "hook:"+e.Hook)
	}
}
