package main

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The consumer-protocol bytes are byte for byte what the Python driver's codec
// (shards/core/classic/consumer_protocol.py, version 3) writes for the same values.
func TestConsumerProtocolBytesAreThePythonCodecs(t *testing.T) {
	cases := []struct {
		got  []byte
		want string
	}{
		{encodeSubscription("lt-x-steady"), "000300000001000b6c742d782d737465616479ffffffff00000000ffffffffffff"},
		{encodeAssignment("lt-x-steady", []int32{0, 1, 5}), "000300000001000b6c742d782d73746561647900000003000000000000000100000005ffffffff"},
		{encodeAssignment("lt-x-steady", nil), "000300000000ffffffff"},
	}
	for _, c := range cases {
		if got := hex.EncodeToString(c.got); got != c.want {
			t.Errorf("got %s, want %s", got, c.want)
		}
	}
	raw, _ := hex.DecodeString(cases[1].want)
	ps, err := decodeAssignment(raw, "lt-x-steady")
	if err != nil || !reflect.DeepEqual(ps, []int32{0, 1, 5}) {
		t.Errorf("decode: %v %v", ps, err)
	}
	if ps, err := decodeAssignment(raw, "other"); err != nil || len(ps) != 0 {
		t.Errorf("another topic's partitions: %v %v", ps, err)
	}
	if _, err := decodeAssignment(raw[:len(raw)-7], "lt-x-steady"); err == nil {
		t.Error("a truncated assignment decodes")
	}
}

// The leader's range assignment is loadtest/members.py's range_assignment.
func TestRangeAssignment(t *testing.T) {
	got := rangeAssignment([]string{"b", "a", "c"}, 8)
	want := map[string][]int32{"a": {0, 1, 2}, "b": {3, 4, 5}, "c": {6, 7}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// A built-in's events are fractions of its duration; a file's [[events]] take the Python
// driver's defaults and replace the base's; an unknown event kind or field is refused.
func TestScenarioEvents(t *testing.T) {
	s, err := builtin("churn", 20)
	if err != nil || len(s.Events) != 2 || s.Events[0].AtS != 4 || s.Events[1].AtS != 5 {
		t.Fatalf("churn over 20 s: %+v %v", s.Events, err)
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s, err = load(write("a.toml", "base = \"scale-out\"\nduration_s = 10.0\n[[events]]\nat_s = 1.5\nkind = \"restart\"\n[hooks]\nkill = \"true\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{{AtS: 1.5, Kind: "restart", Count: 1, IntervalS: 0.5}}
	if !reflect.DeepEqual(s.Events, want) || s.Name != "scale-out" || s.Hooks["kill"] != "true" {
		t.Errorf("got %+v %q %v", s.Events, s.Name, s.Hooks)
	}
	s, err = load(write("b.toml", "base = \"rolling-restart\"\nduration_s = 5.0\n"))
	if err != nil || s.Events[0].AtS != 1 || s.Events[0].Count != 0 || s.Protocol != "mixed" {
		t.Errorf("rolling-restart over 5 s: %+v %v", s, err)
	}
	if _, err := load(write("c.toml", "[[events]]\nat_s = 1.0\nkind = \"explode\"\n")); err == nil || !strings.Contains(err.Error(), "event kind \"explode\"") {
		t.Errorf("unknown kind: %v", err)
	}
	if _, err := load(write("d.toml", "[[events]]\nat_s = 1.0\nkind = \"hook\"\n")); err == nil || !strings.Contains(err.Error(), "hook = NAME") {
		t.Errorf("hook without a name: %v", err)
	}
	if _, err := load(write("e.toml", "[[events]]\nat_s = 1.0\nkind = \"join\"\nwhen = 3\n")); err == nil || !strings.Contains(err.Error(), "unknown scenario fields: events.when") {
		t.Errorf("unknown event field: %v", err)
	}
}
