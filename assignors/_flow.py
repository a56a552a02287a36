"""A small min-cost flow solver for the aggregated planning graphs of the uniform assignor
(tens to a few thousand nodes — groups of partitions and groups of members, never single
partitions).

Successive shortest paths with Johnson potentials and Dijkstra; every augmentation pushes
the full bottleneck, so the number of augmentations depends on the graph's shape, not on
the amount of flow. Arc costs must be non-negative. Deterministic: ties are broken by node
and arc index.
"""

from __future__ import annotations

import heapq

_INF = float("inf")


class MinCostFlow:
    __slots__ = ("_adj", "_cap", "_cost", "_head", "_orig")

    def __init__(self, nodes: int) -> None:
        self._adj: list[list[int]] = [[] for _ in range(nodes)]
        self._head: list[int] = []  # arc -> node it points to; arc ^ 1 is its reverse
        self._cap: list[int] = []
        self._cost: list[int] = []
        self._orig: list[int] = []

    def add_node(self) -> int:
        self._adj.append([])
        return len(self._adj) - 1

    def add_arc(self, u: int, v: int, cap: int, cost: int) -> int:
        """Add an arc and return its handle (for ``flow``)."""
        if cost < 0:
            raise ValueError("arc costs must be non-negative")
        a = len(self._head)
        self._head += (v, u)
        self._cap += (cap, 0)
        self._cost += (cost, -cost)
        self._orig += (cap, 0)
        self._adj[u].append(a)
        self._adj[v].append(a + 1)
        return a

    def flow(self, arc: int) -> int:
        return self._orig[arc] - self._cap[arc]

    def run(self, source: int, sink: int, limit: int) -> tuple[int, int]:
        """Send up to ``limit`` units from ``source`` to ``sink`` at minimum cost; returns
        ``(flow, cost)``."""
        n = len(self._adj)
        adj, head, cap, cost = self._adj, self._head, self._cap, self._cost
        potential = [0] * n
        flow = total = 0
        while flow < limit:
            dist: list[float] = [_INF] * n
            via = [-1] * n
            dist[source] = 0
            heap = [(0, source)]
            while heap:
                d, u = heapq.heappop(heap)
                if d > dist[u]:
                    continue
                pu = potential[u]
                for a in adj[u]:
                    if cap[a]:
                        v = head[a]
                        nd = d + cost[a] + pu - potential[v]
                        if nd < dist[v]:
                            dist[v] = nd
                            via[v] = a
                            heapq.heappush(heap, (nd, v))
            if dist[sink] == _INF:
                break
            for v in range(n):
                if dist[v] < _INF:
                    potential[v] += int(dist[v])
            push = limit - flow
            v = sink
            while v != source:
                a = via[v]
                if cap[a] < push:
                    push = cap[a]
                v = head[a ^ 1]
            v = sink
            while v != source:
                a = via[v]
                cap[a] -= push
                cap[a ^ 1] += push
                total += push * cost[a]
                v = head[a ^ 1]
            flow += push
        return flow, total
