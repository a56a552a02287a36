package io.groupcoord.member;

/** An error the coordinator answered with (a Kafka error code), or a transport failure. */
public class GroupMemberException extends RuntimeException {
  private final int errorCode;

  public GroupMemberException(int errorCode, String message) {
    super(message);
    this.errorCode = errorCode;
  }

  public GroupMemberException(String message, Throwable cause) {
    super(message, cause);
    this.errorCode = -1;
  }

  /** The Kafka error code (e.g. 111 UNRELEASED_INSTANCE_ID), or -1 for a transport failure. */
  public int errorCode() {
    return errorCode;
  }
}
