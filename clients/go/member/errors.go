package member

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kafka error codes the member acts on (the coordinator's error_code fields).
const (
	CodeNone                      int32 = 0
	CodeCoordinatorLoadInProgress int32 = 14
	CodeCoordinatorNotAvailable   int32 = 15
	CodeNotCoordinator            int32 = 16
	CodeUnknownMemberID           int32 = 25
	CodeFencedInstanceID          int32 = 82
	CodeFencedMemberEpoch         int32 = 110
	CodeUnreleasedInstanceID      int32 = 111
	CodeStaleMemberEpoch          int32 = 113
)

var codeNames = map[int32]string{
	-1: "UNKNOWN_SERVER_ERROR", 3: "UNKNOWN_TOPIC_OR_PARTITION", 7: "REQUEST_TIMED_OUT",
	12: "OFFSET_METADATA_TOO_LARGE", 13: "NETWORK_EXCEPTION", 14: "COORDINATOR_LOAD_IN_PROGRESS",
	15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 19: "NOT_ENOUGH_REPLICAS",
	22: "ILLEGAL_GENERATION", 23: "INCONSISTENT_GROUP_PROTOCOL", 24: "INVALID_GROUP_ID",
	25: "UNKNOWN_MEMBER_ID", 26: "INVALID_SESSION_TIMEOUT", 27: "REBALANCE_IN_PROGRESS",
	28: "INVALID_COMMIT_OFFSET_SIZE", 29: "TOPIC_AUTHORIZATION_FAILED",
	30: "GROUP_AUTHORIZATION_FAILED", 42: "INVALID_REQUEST", 68: "NON_EMPTY_GROUP",
	69: "GROUP_ID_NOT_FOUND", 81: "GROUP_MAX_SIZE_REACHED", 82: "FENCED_INSTANCE_ID",
	86: "GROUP_SUBSCRIBED_TO_TOPIC", 88: "UNSTABLE_OFFSET_COMMIT", 100: "UNKNOWN_TOPIC_ID",
	110: "FENCED_MEMBER_EPOCH", 111: "UNRELEASED_INSTANCE_ID", 112: "UNSUPPORTED_ASSIGNOR",
	113: "STALE_MEMBER_EPOCH", 130: "INVALID_REGULAR_EXPRESSION",
}

// Error is a Kafka error code the coordinator answered with.
type Error struct {
	Op      string // the RPC: ConsumerGroupHeartbeat, OffsetCommit, ...
	Code    int32
	Message string
}

func (e *Error) Error() string {
	name := codeNames[e.Code]
	if name == "" {
		name = fmt.Sprintf("error %d", e.Code)
	}
	if e.Message != "" {
		return fmt.Sprintf("%s: %s (%d): %s", e.Op, name, e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s (%d)", e.Op, name, e.Code)
}

// ErrorCode is the Kafka error code in err's chain (CodeNone when there is none).
func ErrorCode(err error) int32 {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeNone
}

// routing: the coordinator moved or is not ready: find it again and retry.
func routing(code int32) bool {
	return code == CodeNotCoordinator || code == CodeCoordinatorNotAvailable ||
		code == CodeCoordinatorLoadInProgress
}

// retriable: a routing error code, or the transport failed (UNAVAILABLE, DEADLINE_EXCEEDED of
// one RPC whose own timeout expired).
func retriable(err error) bool {
	if err == nil {
		return false
	}
	if routing(ErrorCode(err)) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}
