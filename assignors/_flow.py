"""A small min-cost flow solver for the aggregated planning graphs of the uniform assignor
(tens to a few thousand nodes — groups of partitions and groups of members, never single
partitions).

Primal-dual successive shortest paths: Johnson potentials from Dijkstra, and a blocking
flow over all shortest paths per round, so the number of rounds is the number of distinct
path costs, not the amount of flow or the number of paths. Arc costs must be non-negative.
Deterministic: ties are broken by node and arc index.
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
        ``(flow, cost)``.

        Primal-dual: Dijkstra on reduced costs gives new potentials, then a blocking flow
        (Dinic) saturates every shortest path at once — one round per distinct path
        length instead of one per path."""
        n = len(self._adj)
        adj, head, cap, cost = self._adj, self._head, self._cap, self._cost
        potential = [0] * n
        flow = total = 0
        while flow < limit:
            dist: list[float] = [_INF] * n
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
                            heapq.heappush(heap, (nd, v))
            reach = dist[sink]
            if reach == _INF:
                break
            for v in range(n):
                # Capping at the sink's distance keeps every reduced cost non-negative.
                dv = dist[v]
                potential[v] += int(dv if dv < reach else reach)
            pushed = self._blocking_flow(source, sink, limit - flow, potential)
            flow += pushed
            total += pushed * (potential[sink] - potential[source])
        return flow, total

    def _blocking_flow(self, source: int, sink: int, limit: int, potential: list[int]) -> int:
        """Dinic on the admissible arcs (residual, zero reduced cost)."""
        n = len(self._adj)
        adj, head, cap, cost = self._adj, self._head, self._cap, self._cost

        def admissible(a: int, u: int) -> bool:
            return cap[a] > 0 and cost[a] + potential[u] - potential[head[a]] == 0

        pushed = 0
        while pushed < limit:
            level = [-1] * n
            level[source] = 0
            frontier = [source]
            while frontier and level[sink] < 0:
                nxt = []
                for u in frontier:
                    for a in adj[u]:
                        v = head[a]
                        if level[v] < 0 and admissible(a, u):
                            level[v] = level[u] + 1
                            nxt.append(v)
                frontier = nxt
            if level[sink] < 0:
                break
            it = [0] * n
            while pushed < limit:
                # Depth-first search for one path along the level graph.
                path: list[int] = []
                u = source
                while u != sink:
                    arcs = adj[u]
                    i = it[u]
                    while i < len(arcs):
                        a = arcs[i]
                        v = head[a]
                        if level[v] == level[u] + 1 and admissible(a, u):
                            break
                        i += 1
                    it[u] = i
                    if i < len(arcs):
                        path.append(arcs[i])
                        u = head[arcs[i]]
                    elif u == source:
                        break
                    else:
                        level[u] = -1  # dead end for this phase
                        a = path.pop()
                        u = head[a ^ 1]
                        it[u] += 1
                if u != sink:
                    break
                push = limit - pushed
                for a in path:
                    if cap[a] < push:
                        push = cap[a]
                for a in path:
                    cap[a] -= push
                    cap[a ^ 1] += push
                pushed += push
        return pushed
