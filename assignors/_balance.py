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
    todo = [t for t in range(n_topics) if unassigned[t] > 0 and subscribers[t]]
    members_of = {t: sum(sizes[k] for k in subscribers[t]) for t in todo}
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

    # 2. Improving chains, in phases. Nodes: classes 0..K-1, topics K..K+T-1.
    active = [bool(subs[k]) for k in range(n_classes)]
    while True:
        top = -1
        bottom = None
        for k in range(n_classes):
            if active[k]:
                hi = -(-load[k] // sizes[k])
                if hi > top:
                    top = hi
                lo = load[k] // sizes[k]
                if bottom is None or lo < bottom:
                    bottom = lo
        if bottom is None or top - bottom <= 1:
            break  # no class is two levels below another: nothing can improve
        sources = [k for k in range(n_classes) if active[k] and -(-load[k] // sizes[k]) == top]

        # Layer the graph breadth-first from all top classes at once.
        depth = [-1] * (n_classes + n_topics)
        for k in sources:
            depth[k] = 0
        frontier = sources
        any_sink = False
        while frontier:
            nxt = []
            for u in frontier:
                if u < n_classes:
                    xu = x[u]
                    for t in subs[u]:
                        node = n_classes + t
                        if depth[node] < 0 and xu.get(t):
                            depth[node] = depth[u] + 1
                            nxt.append(node)
                else:
                    for k in subscribers[u - n_classes]:
                        if active[k] and depth[k] < 0:
                            depth[k] = depth[u] + 1
                            nxt.append(k)
                            if load[k] // sizes[k] <= top - 2:
                                any_sink = True
            frontier = nxt
        if not any_sink:
            # Nothing reachable from the top is two levels lower, and since no later shift
            # touches these classes, nothing ever will be: freeze them.
            for k in range(n_classes):
                if depth[k] >= 0:
                    active[k] = False
            continue

        # Find chains along the layers (each step one layer deeper), as many as the top
        # classes need. A class tries handing on partitions it did not retain first.
        order: dict[int, list[int]] = {}
        cursor = [0] * (n_classes + n_topics)

        for a in sources:
            while -(-load[a] // sizes[a]) == top:
                path = [a]
                while path:
                    u = path[-1]
                    if u < n_classes and u != a and load[u] // sizes[u] <= top - 2:
                        break
                    nbrs = order.get(u)
                    if nbrs is None:
                        nbrs = order[u] = _neighbours(u, n_classes, subs, subscribers, x, retained)
                    i = cursor[u]
                    while i < len(nbrs):
                        v = nbrs[i]
                        if depth[v] == depth[u] + 1 and (
                            x[u].get(v - n_classes) if u < n_classes else active[v]
                        ):
                            break
                        i += 1
                    cursor[u] = i
                    if i < len(nbrs):
                        path.append(nbrs[i])
                    else:
                        depth[u] = -1  # dead end for this phase
                        path.pop()
                        if path:
                            cursor[path[-1]] += 1
                if not path:
                    break
                _shift(path, n_classes, sizes, x, retained, load)
    return x


def _neighbours(
    u: int,
    n_classes: int,
    subs: list[list[int]],
    subscribers: list[list[int]],
    x: list[dict[int, int]],
    retained: list[dict[int, int]],
) -> list[int]:
    """Out-neighbours of a node in the chain graph: for a class, the topics it holds, those
    it did not retain first (handing those on moves nothing that was sticky); for a topic,
    its subscribing classes."""
    if u >= n_classes:
        return subscribers[u - n_classes]
    xu, ru = x[u], retained[u]
    held = [t for t in subs[u] if xu.get(t)]
    held.sort(key=lambda t: xu[t] <= ru.get(t, 0))
    return [n_classes + t for t in held]


def _shift(
    path: list[int],
    n_classes: int,
    sizes: list[int],
    x: list[dict[int, int]],
    retained: list[dict[int, int]],
    load: list[int],
) -> None:
    """Move partitions along ``path`` (class, topic, class, topic, …, class): each class
    hands the next one partitions of the topic between them."""
    source, receiver = path[0], path[-1]
    limit = None
    for j in range(0, len(path) - 1, 2):
        giver, t = path[j], path[j + 1] - n_classes
        have = x[giver][t]
        spare = have - retained[giver].get(t, 0)
        cap = spare if spare > 0 else have
        limit = cap if limit is None else min(limit, cap)
    a_n, b_n = sizes[source], sizes[receiver]
    a_load, b_load = load[source], load[receiver]
    # As many as brings the two ends depth, as long as the source stays a top class.
    d = max(1, min(limit or 1, (a_load * b_n - b_load * a_n) // (a_n + b_n)))
    before = _square_cost(a_load, a_n) + _square_cost(b_load, b_n)
    if _square_cost(a_load - d, a_n) + _square_cost(b_load + d, b_n) >= before:
        d = 1
    for j in range(0, len(path) - 1, 2):
        giver, t, taker = path[j], path[j + 1] - n_classes, path[j + 2]
        left = x[giver][t] - d
        if left:
            x[giver][t] = left
        else:
            del x[giver][t]
        x[taker][t] = x[taker].get(t, 0) + d
    load[source] -= d
    load[receiver] += d
