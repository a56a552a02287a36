package io.groupcoord.member;

import java.util.concurrent.ThreadLocalRandom;

/** Bounded exponential backoff with jitter: 100 ms, doubling, capped at 5 s, +-20 %. */
final class Backoff {
  static final long START_MS = 100;
  static final long CAP_MS = 5_000;
  private long next = START_MS;

  /** The next delay (and doubles the one after, up to the cap). */
  long next() {
    long base = next;
    next = Math.min(CAP_MS, next * 2);
    double jitter = 0.8 + 0.4 * ThreadLocalRandom.current().nextDouble();
    return Math.max(1, (long) (base * jitter));
  }

  void reset() {
    next = START_MS;
  }
}
