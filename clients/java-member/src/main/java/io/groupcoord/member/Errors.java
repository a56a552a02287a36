package io.groupcoord.member;

/** The Kafka error codes the member acts on. */
final class Errors {
  static final int NONE = 0;
  static final int COORDINATOR_LOAD_IN_PROGRESS = 14;
  static final int COORDINATOR_NOT_AVAILABLE = 15;
  static final int NOT_COORDINATOR = 16;
  static final int UNKNOWN_MEMBER_ID = 25;
  static final int FENCED_INSTANCE_ID = 82;
  static final int FENCED_MEMBER_EPOCH = 110;
  static final int UNRELEASED_INSTANCE_ID = 111;
  static final int STALE_MEMBER_EPOCH = 113;
  /** groupcoord's: an installed client-side assignment the coordinator refused. */
  static final int INVALID_ASSIGNMENT = 10001;

  private Errors() {}

  /** The group lives elsewhere now, or its shard is not ready: find it again and retry. */
  static boolean reroute(int code) {
    return code == NOT_COORDINATOR
        || code == COORDINATOR_NOT_AVAILABLE
        || code == COORDINATOR_LOAD_IN_PROGRESS;
  }

  static boolean fenced(int code) {
    return code == FENCED_MEMBER_EPOCH || code == UNKNOWN_MEMBER_ID;
  }

  static boolean staticConflict(int code) {
    return code == UNRELEASED_INSTANCE_ID || code == FENCED_INSTANCE_ID;
  }
}
