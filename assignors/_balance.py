"""Balance planning for heterogeneous subscriptions, at the level of subscription classes.

Members with identical subscriptions are interchangeable as far as balance is concerned, so
the plan decides only how many partitions of each topic each *class* receives
(``x[k][t]``); inside a class, sizes are then spread as evenly as possible (they differ by
at most one). The plan is *most even*: the vector of member sizes minimises the sum of
squares, which for this kind of problem (the feasible size vectors form an M-convex set) is
the same as being decreasingly minimal — no size can be lowered without raising a smaller
or equal one. The optimality criterion, which the tests check on the final assignment: no
chain of moves "member a gives a partition of topic t to member b subscribed to t, b gives
a partition of t' to c, …" leads from a member to one with at least two partitions fewer.

Algorithm:
1. Start from what members retain (stickiness), give unassigned partitions topic by topic
   (most partitions per subscriber first, as Kafka does) to the least loaded subscribing
   class — water filling.
2. While some improving chain exists, shift partitions along one. Chains are searched
   breadth-first on the class/topic graph from all classes at the current maximum level; a
   chain prefers handing on partitions that were not retained (0-1 BFS on "retained
   partitions moved"), and moves as many partitions at once as its edges and the two end
   classes' balance allow. When nothing reachable from the top classes is two levels below,
   those classes can never take part in an improvement again and are frozen.
Each shift strictly lowers the sum of squares, so this terminates; it ends exactly when no
improving chain is left, i.e. at the optimum.
"""

from __future__ import annotations

import heapq
from collections import deque

__all__ = ["plan_classes"]


def _square_cost(total: int, size: int) -> int:
    q, r = divmod(total, size)
    return r * (q + 1) * (q + 1) + (size - r) * q * q


def plan_classes(
    sizes: list[int],
    subs: list[list[int]],
    counts: list[int],
    retained: list[dict[int, int]],
) -> list[dict[int, int]]:
    """Partitions per (class, topic).

    ``sizes[k]``: members in class ``k``; ``subs[k]``: its sorted topic indices;
    ``counts[t]``: partitions of topic ``t``; ``retained[k][t]``: partitions of ``t`` the
    class's members keep from their current assignment (``sum_k retained[k][t] <=
    counts[t]``). Returns ``x`` with ``x[k][t] > 0`` only for subscribed topics and
    ``sum_k x[k][t] == counts[t]`` for every topic with a subscriber."""
    n_classes = len(sizes)
    n_topics = len(counts)
    x = [dict(r) for r in retained]
    load = [sum(r.values()) for r in retained]
    subscribers: list[list[int]] = [[] for _ in range(n_topics)]
    for k in range(n_classes):
        for t in subs[k]:
            subscribers[t].append(k)

    # 1. Water filling of the unassigned partitions.
    unassigned = list(counts)
    for r in retained:
        for t, c in r.items():
            unassigned[t] -= c
    members_of = [sum(sizes[k] for k in subscribers[t]) for t in range(n_topics)]
    todo = [t for t in range(n_topics) if unassigned[t] > 0 and subscribers[t]]
    todo.sort(key=lambda t: (-counts[t] / members_of[t], members_of[t], t))
    for t in todo:
        left = unassigned[t]
        heap = [(load[k] // sizes[k], k) for k in subscribers[t]]
        heapq.heapify(heap)
        while left:
            level, k = heapq.heappop(heap)
            give = min((level + 1) * sizes[k] - load[k], left)
            x[k][t] = x[k].get(t, 0) + give
            load[k] += give
            left -= give
            heapq.heappush(heap, (load[k] // sizes[k], k))

    # 2. Improving chains. Nodes: classes 0..K-1, topics K..K+T-1.
    active = [bool(subs[k]) for k in range(n_classes)]
    inf = n_classes + n_topics + 1
    while True:
        top = -1
        for k in range(n_classes):
            if active[k]:
                hi = -(-load[k] // sizes[k])
                if hi > top:
                    top = hi
        if top < 0:
            break
        sources = [k for k in range(n_classes) if active[k] and -(-load[k] // sizes[k]) == top]
        dist = [inf] * (n_classes + n_topics)
        via = [-1] * (n_classes + n_topics)  # topic: giving class; class: topic node
        queue: deque[int] = deque()
        for k in sources:
            dist[k] = 0
            queue.append(k)
        while queue:
            u = queue.popleft()
            du = dist[u]
            if u < n_classes:
                xu = x[u]
                ru = retained[u]
                for t in subs[u]:
                    have = xu.get(t, 0)
                    if not have:
                        continue
                    step = 0 if have > ru.get(t, 0) else 1
                    node = n_classes + t
                    if du + step < dist[node]:
                        dist[node] = du + step
                        via[node] = u
                        if step:
                            queue.append(node)
                        else:
                            queue.appendleft(node)
            else:
                for k in subscribers[u - n_classes]:
                    if active[k] and du < dist[k]:
                        dist[k] = du
                        via[k] = u
                        queue.appendleft(k)
        best = None
        for k in range(n_classes):
            if dist[k] < inf and load[k] // sizes[k] <= top - 2:
                cand = (dist[k], load[k] // sizes[k], k)
                if best is None or cand < best:
                    best = cand
        if best is None:
            for k in range(n_classes):
                if dist[k] < inf:
                    active[k] = False
            continue

        # Walk the chain back from the receiver to a top class.
        receiver = best[2]
        hops: list[tuple[int, int, int]] = []  # (giver, topic, taker)
        node = receiver
        limit = None
        while via[node] != -1:
            topic_node = via[node]
            giver = via[topic_node]
            t = topic_node - n_classes
            hops.append((giver, t, node))
            have = x[giver][t]
            spare = have - retained[giver].get(t, 0)
            cap = spare if spare > 0 else have
            limit = cap if limit is None else min(limit, cap)
            node = giver
        source = node
        a_n, b_n = sizes[source], sizes[receiver]
        a_load, b_load = load[source], load[receiver]
        d = max(1, min(limit or 1, (a_load * b_n - b_load * a_n) // (a_n + b_n)))
        before = _square_cost(a_load, a_n) + _square_cost(b_load, b_n)
        if _square_cost(a_load - d, a_n) + _square_cost(b_load + d, b_n) >= before:
            d = 1
        for giver, t, taker in hops:
            left = x[giver][t] - d
            if left:
                x[giver][t] = left
            else:
                del x[giver][t]
            x[taker][t] = x[taker].get(t, 0) + d
        load[source] -= d
        load[receiver] += d
    return x
