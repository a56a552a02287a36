package member

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"
)

func tps(topic string, ps ...int32) []TopicPartition {
	var out []TopicPartition
	for _, p := range ps {
		out = append(out, TopicPartition{topic, p})
	}
	return out
}

func TestMinusIsRevokedAndAdded(t *testing.T) {
	owned := append(tps("a", 0, 1, 2), tps("b", 0)...)
	target := append(tps("a", 2, 3), tps("b", 0)...)
	if got, want := minus(owned, target), tps("a", 0, 1); !slices.Equal(got, want) {
		t.Fatalf("revoked %v, want %v", got, want)
	}
	if got, want := minus(target, owned), tps("a", 3); !slices.Equal(got, want) {
		t.Fatalf("added %v, want %v", got, want)
	}
	if got := minus(nil, target); got != nil {
		t.Fatalf("nothing owned, revoked %v", got)
	}
}

func TestBackoffIsBoundedExponentialWithJitter(t *testing.T) {
	b := newBackoff()
	var waits []time.Duration
	for range 12 {
		waits = append(waits, b.next())
	}
	if waits[0] < 50*time.Millisecond || waits[0] > 100*time.Millisecond {
		t.Fatalf("first wait %v, want within [50ms, 100ms]", waits[0])
	}
	for _, w := range waits {
		if w > 5*time.Second {
			t.Fatalf("wait %v over the 5 s cap", w)
		}
	}
	if waits[11] < 2500*time.Millisecond { // capped at 5 s, jittered down to half at most
		t.Fatalf("wait %v after 12 failures, want >= 2.5 s", waits[11])
	}
	b.reset()
	if w := b.next(); w > 100*time.Millisecond {
		t.Fatalf("after reset %v, want <= 100ms", w)
	}
}

func TestMemberIDIsAUUIDInKafkaBase64(t *testing.T) {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(m.ID())
	if len(m.ID()) != 22 || err != nil || len(raw) != 16 || raw[6]>>4 != 4 {
		t.Fatalf("member id %q (%v)", m.ID(), err)
	}
	other, _ := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"}})
	if other.ID() == m.ID() {
		t.Fatal("two members with one id")
	}
}

func TestNewRefusesIncompleteConfigs(t *testing.T) {
	for _, cfg := range []Config{
		{GroupID: "g", Topics: []string{"t"}},
		{Bootstrap: []string{"x:1"}, Topics: []string{"t"}},
		{Bootstrap: []string{"x:1"}, GroupID: "g"},
		{Bootstrap: []string{"x:1"}, GroupID: "g", Topics: []string{"t"}, TopicRegex: "t.*"},
		{Bootstrap: []string{"x:1"}, GroupID: "g", Topics: []string{"t"}, TLS: &TLSConfig{CertFile: "c"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// Nothing listens on the bootstrap address: Commit retries FindCoordinator with backoff
// until its context ends, and returns the error then.
func TestCallRetriesAnUnreachableCoordinatorUntilTheContextEnds(t *testing.T) {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"},
		RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.closeConns()
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = m.Describe(ctx)
	if err == nil || ctx.Err() == nil {
		t.Fatalf("Describe with no server: %v", err)
	}
	if el := time.Since(start); el < 550*time.Millisecond || el > 2*time.Second {
		t.Fatalf("gave up after %v, want at the context's end (600 ms)", el)
	}
}

type panicky struct{}

func (panicky) Name() string              { return "p" }
func (panicky) Versions() (int32, int32)  { return 0, 0 }
func (panicky) Metadata() (int32, []byte) { return 0, nil }
func (panicky) Assign(context.Context, GroupSpec) (map[string]MemberAssignment, error) {
	panic("boom")
}

// An assignor that panics, or none of the group's assignor name: an error (the member then
// installs error = 1 so that another member computes), never a crash.
func TestAssignTurnsAPanicOrAMissingAssignorIntoAnError(t *testing.T) {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"},
		Assignors: []Assignor{panicky{}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.assign(context.Background(), GroupSpec{AssignorName: "p"}); err == nil ||
		!strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("panic: %v", err)
	}
	if _, err := m.assign(context.Background(), GroupSpec{AssignorName: "q"}); err == nil ||
		!strings.Contains(err.Error(), `no client-side assignor named "q"`) {
		t.Fatalf("missing: %v", err)
	}
	decl := m.clientAssignors().GetAssignors()
	if len(decl) != 1 || decl[0].GetName() != "p" {
		t.Fatalf("declared %v", decl)
	}
}

// After Close the member's calls answer ErrClosed (no new connections to a group it left).
func TestCallsAfterCloseAreErrClosed(t *testing.T) {
	m, err := New(Config{Bootstrap: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(context.Background(), map[TopicPartition]int64{{"t", 0}: 1}); err != ErrClosed {
		t.Fatalf("Commit after Close: %v", err)
	}
	if err := m.Start(context.Background()); err == nil {
		t.Fatal("Start after Close accepted")
	}
}
