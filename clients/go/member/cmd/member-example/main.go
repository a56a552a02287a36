// member-example joins a consumer group with the member library and prints one JSON line per
// event on stdout:
//
//	{"event":"assigned","partitions":[["t",0],["t",3]],"epoch":3,"ms":1733330000123,"member_id":"..."}
//
// (the format the three member libraries' examples share: docs/member-libraries.md). events:
// joined (before the first assignment after each join), assigned, revoked, lost (the
// callbacks), error (OnError), left (after the leave). It leaves the group on stdin EOF, SIGTERM or SIGINT, and exits 0 when the leave was
// acknowledged. Lines on stdin are commands, each answered by one JSON line:
//
//	commit    commits offset 100+partition for every partition the member owns ("commit")
//	fetch     the group's committed offsets ("fetch": offsets by "topic-partition")
//	describe  the group as ConsumerGroupDescribe says ("describe": state, members)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/groupcoord/groupcoord/clients/go/member"
)

type event struct {
	Event      string                   `json:"event"`
	Partitions []pair                   `json:"partitions"`
	Epoch      int32                    `json:"epoch"`
	Ms         int64                    `json:"ms"`
	MemberID   string                   `json:"member_id"`
	Error      string                   `json:"error,omitempty"`
	Offsets    map[string]int64         `json:"offsets,omitempty"`
	Failed     map[string]string        `json:"failed,omitempty"`
	Group      *member.GroupDescription `json:"group,omitempty"`
}

func main() {
	bootstrap := flag.String("bootstrap", "localhost:50051", "gRPC addresses of shards, comma-separated")
	group := flag.String("group", "", "group id (required)")
	topics := flag.String("topics", "", "topics to subscribe to, comma-separated")
	regex := flag.String("regex", "", "subscribe by a broker-side RE2 regex instead of -topics")
	instance := flag.String("instance-id", "", "static membership: the instance id")
	rack := flag.String("rack", "", "rack id")
	assignor := flag.String("assignor", "", "server assignor (uniform, range, ...)")
	rebalance := flag.Duration("rebalance-timeout", 30*time.Second, "rebalance timeout")
	clientAssignor := flag.String("client-assignor", "", "declare a client-side round-robin assignor of this name")
	revokeDelay := flag.Duration("revoke-delay", 0, "block in the first OnRevoked this long (a slow callback)")
	ca := flag.String("tls-ca", "", "TLS: CA file (TLS when set)")
	cert := flag.String("tls-cert", "", "mTLS: client certificate")
	key := flag.String("tls-key", "", "mTLS: client key")
	serverName := flag.String("tls-server-name", "", "TLS: server name to verify")
	flag.Parse()
	if *group == "" {
		fmt.Fprintln(os.Stderr, "member-example: -group is required")
		os.Exit(2)
	}

	var mu sync.Mutex
	out := json.NewEncoder(os.Stdout)
	var m *member.Member
	joined := false // (the callbacks run one at a time)
	write := func(e event) {
		mu.Lock()
		defer mu.Unlock()
		e.Ms, e.MemberID, e.Epoch = time.Now().UnixMilli(), m.ID(), m.Epoch()
		if e.Partitions == nil {
			e.Partitions = []pair{}
		}
		_ = out.Encode(e)
	}
	emit := func(name string, tps []member.TopicPartition, err error) {
		e := event{Event: name, Partitions: pairs(tps)}
		if err != nil {
			e.Error = err.Error()
		}
		write(e)
	}
	cfg := member.Config{
		Bootstrap: strings.Split(*bootstrap, ","), GroupID: *group, TopicRegex: *regex,
		InstanceID: *instance, RackID: *rack, ServerAssignor: *assignor,
		RebalanceTimeout: *rebalance, ClientID: "member-example",
		Listener: member.ListenerFuncs{
			Assigned: func(_ context.Context, tps []member.TopicPartition) {
				if !joined { // OnAssigned comes once after every join, even with nothing
					joined = true
					emit("joined", nil, nil)
				}
				emit("assigned", tps, nil)
			},
			Revoked: func(_ context.Context, tps []member.TopicPartition) {
				time.Sleep(*revokeDelay) // the work of giving them up; then they are released
				*revokeDelay = 0
				emit("revoked", tps, nil)
			},
			Lost: func(_ context.Context, tps []member.TopicPartition) {
				joined = false // it rejoins
				emit("lost", tps, nil)
			},
		},
		OnError: func(err error) { emit("error", nil, err) },
	}
	if *clientAssignor != "" {
		cfg.Assignors = []member.Assignor{roundRobin{*clientAssignor}}
	}
	if *topics != "" {
		cfg.Topics = strings.Split(*topics, ",")
	}
	if *ca != "" || *cert != "" {
		cfg.TLS = &member.TLSConfig{CAFile: *ca, CertFile: *cert, KeyFile: *key, ServerName: *serverName}
	}
	var err error
	if m, err = member.New(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "member-example:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { // commands; EOF: leave
		lines := bufio.NewScanner(os.Stdin)
		for lines.Scan() {
			command(ctx, m, strings.TrimSpace(lines.Text()), write)
		}
		stop()
	}()
	err = m.Run(ctx)
	emit("left", nil, err)
	if err != nil {
		os.Exit(1)
	}
}

func command(ctx context.Context, m *member.Member, cmd string, write func(event)) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	e := event{Event: cmd}
	var err error
	switch cmd {
	case "commit":
		owned := m.Assignment()
		e.Partitions = pairs(owned)
		offsets := map[member.TopicPartition]int64{}
		for _, tp := range owned {
			offsets[tp] = 100 + int64(tp.Partition)
		}
		var failed map[member.TopicPartition]error
		failed, err = m.Commit(ctx, offsets)
		e.Failed = map[string]string{}
		for tp, ferr := range failed {
			e.Failed[tp.String()] = ferr.Error()
		}
	case "fetch":
		var offsets map[member.TopicPartition]int64
		offsets, err = m.Fetch(ctx, nil)
		e.Offsets = map[string]int64{}
		for tp, off := range offsets {
			e.Offsets[tp.String()] = off
		}
	case "describe":
		e.Group, err = m.Describe(ctx)
	case "":
		return
	default:
		err = fmt.Errorf("unknown command %q (commit, fetch, describe)", cmd)
	}
	if err != nil {
		e.Error = err.Error()
	}
	write(e)
}

// roundRobin is a client-side assignor: partition p of each topic (by name) goes to the
// (p mod n)-th of its n subscribers by member id.
type roundRobin struct{ name string }

func (r roundRobin) Name() string              { return r.name }
func (r roundRobin) Versions() (int32, int32)  { return 0, 1 }
func (r roundRobin) Metadata() (int32, []byte) { return 1, nil }
func (r roundRobin) Assign(_ context.Context, spec member.GroupSpec) (map[string]member.MemberAssignment, error) {
	plan := map[string]member.MemberAssignment{}
	for id := range spec.Members {
		plan[id] = member.MemberAssignment{Partitions: map[string][]int32{}, MetadataVersion: 1,
			MetadataBytes: []byte(fmt.Sprintf("%d members", len(spec.Members)))}
	}
	for _, t := range spec.Topics {
		var takers []string
		for id, m := range spec.Members {
			if slices.Contains(m.SubscribedTopicIDs, t.ID) {
				takers = append(takers, id)
			}
		}
		slices.Sort(takers)
		for p := range t.NumPartitions {
			id := takers[int(p)%len(takers)]
			plan[id].Partitions[t.ID] = append(plan[id].Partitions[t.ID], p)
		}
	}
	return plan, nil
}

// pair is a partition as the examples print it: ["topic", partition].
type pair [2]any

func pairs(tps []member.TopicPartition) []pair {
	out := make([]pair, 0, len(tps))
	for _, tp := range tps {
		out = append(out, pair{tp.Topic, tp.Partition})
	}
	return out
}
