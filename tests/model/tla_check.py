"""An explicit-state checker for the TLA+ form of the model (``models/kip848.tla``), for small
constants: breadth first over every state reachable from ``Init`` by ``Next``, a state
invariant on each state and action properties on each step -- what TLC does with the
``.cfg``, for the fragment of TLA+ the specification uses. TLC and Apalache cannot be
obtained here (docs/model.md); the text is parsed by the ``tla`` package (a TLA+ parser) and
evaluated by the interpreter below.

The fragment: integers, strings, booleans, finite sets (enumeration, ``{x \\in S : P}``,
``{e : x \\in S}``, ``[S -> T]``, ``\\cup \\cap \\ \\subseteq \\in \\notin``), functions and
records (``[x \\in S |-> e]``, ``[k |-> e, ...]``, ``f[x]``, ``r.k``, ``DOMAIN``, ``EXCEPT``
with ``![x]`` / ``!.k`` and ``@``), ``Cardinality`` (of an extended ``FiniteSets``),
``a..b`` (of ``Naturals``), ``IF``, ``CASE ... [] OTHER``, ``LET``, bounded ``\\A`` /
``\\E``, user operators with parameters, and in actions ``x' = e`` binding the next state,
``UNCHANGED``, conjunction, disjunction and ``\\E`` enumerating alternatives (TLC's way of
computing successors). Anything else raises ``Unsupported``: the checker never guesses.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import tla


class Unsupported(Exception):
    """A construct outside the fragment this checker evaluates."""


class Fn:
    """A TLA+ function (records included): immutable, hashable, compared by its graph."""

    __slots__ = ("_d", "_key")

    def __init__(self, d: Mapping[Any, Any]) -> None:
        self._d = dict(d)
        self._key = tuple(sorted(self._d.items(), key=lambda kv: repr(kv[0])))

    def __getitem__(self, k: Any) -> Any:
        try:
            return self._d[k]
        except KeyError:
            raise Unsupported(f"{k!r} is not in the domain {sorted(map(repr, self._d))}") from None

    def domain(self) -> frozenset[Any]:
        return frozenset(self._d)

    def replaced(self, k: Any, v: Any) -> Fn:
        if k not in self._d:
            raise Unsupported(f"EXCEPT at {k!r}, outside the domain")
        d = dict(self._d)
        d[k] = v
        return Fn(d)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fn) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return "[" + ", ".join(f"{k!r} |-> {v!r}" for k, v in self._key) + "]"


@dataclass
class Def:
    params: tuple[str, ...]
    body: Any


@dataclass
class Report:
    states: int
    transitions: int
    violations: list[str] = field(default_factory=list)
    #: every value each variable took (for coverage checks)
    values: dict[str, set[Any]] = field(default_factory=dict)


def _name(node: Any) -> str:
    if node.symbol != "operator_application" or node.arguments:
        raise Unsupported(f"expected a name, got {node.symbol}")
    return str(node.operator)


class Spec:
    """A parsed module with its constants bound."""

    def __init__(self, text: str, constants: Mapping[str, Any]) -> None:
        tree = tla.parse(text)
        if tree is None:
            raise Unsupported("the module does not parse")
        self.defs: dict[str, Def] = {}
        self.variables: list[str] = []
        self.constants = dict(constants)
        self.extends = {_name(e) for e in tree.extendees or ()}
        for unit in tree.units:
            if unit.symbol == "variables":
                self.variables += [_name(n) for n in unit.names]
            elif unit.symbol == "constants":
                missing = {_name(n) for n in unit.names} - set(self.constants)
                if missing:
                    raise Unsupported(f"constants without a value: {sorted(missing)}")
            elif unit.symbol == "operator_definition":
                params = tuple(_name(p) for p in unit.arity or ())
                self.defs[unit.name] = Def(params, unit.definiens)
            elif unit.symbol != "comment":
                raise Unsupported(f"module unit {unit.symbol}")

    # ---- expressions ----------------------------------------------------------------------
    def ev(self, node: Any, env: dict[str, Any], nxt: dict[str, Any] | None = None) -> Any:
        """The value of ``node``; primed variables are read from ``nxt``."""
        s = node.symbol
        if s == "integral_numeral":
            return int(node.value)
        if s == "string_literal":
            return node.value[1:-1]
        if s == "boolean_literal":
            return node.value == "TRUE"
        if s == "parentheses":
            return self.ev(node.expression, env, nxt)
        if s == "set_enumeration":
            return frozenset(self.ev(i, env, nxt) for i in node.items)
        if s == "tuple":
            return tuple(self.ev(i, env, nxt) for i in node.items)
        if s == "record":
            return Fn({k: self.ev(v, env, nxt) for k, v in node.key_values})
        if s == "field":
            return self.ev(node.expression, env, nxt)[node.name]
        if s == "function_application":
            if len(node.arguments) != 1:
                raise Unsupported("f[x, y]")
            return self.ev(node.function, env, nxt)[self.ev(node.arguments[0], env, nxt)]
        if s == "function":
            name = self._single(node.declaration)
            return Fn(
                {
                    b[name]: self.ev(node.value, b, nxt)
                    for b in self._bind(node.declaration, env, nxt)
                }
            )
        if s == "set_of_functions":
            dom = sorted(self.ev(node.domain, env, nxt), key=repr)
            cod = sorted(self.ev(node.codomain, env, nxt), key=repr)
            return frozenset(
                Fn(dict(zip(dom, vals, strict=True)))
                for vals in itertools.product(cod, repeat=len(dom))
            )
        if s == "set_slice":
            return frozenset(
                b[self._single([node.declaration])]
                for b in self._bind([node.declaration], env, nxt)
                if self._true(self.ev(node.predicate, b, nxt))
            )
        if s == "set_comprehension":
            return frozenset(
                self.ev(node.item, b, nxt) for b in self._bind(node.declarations, env, nxt)
            )
        if s == "except":
            f = env["@"] if node.function == "@" else self.ev(node.function, env, nxt)
            for change in node.changes:
                # the path: one step, a field (!.k) or one argument (![x])
                if len(change.item) != 1:
                    raise Unsupported("EXCEPT with a path of several steps")
                step = change.item[0]
                if isinstance(step, str):
                    key = step
                elif len(step) == 1:
                    key = self.ev(step[0], env, nxt)
                else:
                    raise Unsupported("EXCEPT ![x, y]")
                f = f.replaced(key, self.ev(change.expression, {**env, "@": f[key]}, nxt))
            return f
        if s == "if":
            branch = node.then if self._true(self.ev(node.predicate, env, nxt)) else node.else_
            return self.ev(branch, env, nxt)
        if s == "cases":
            for item in node.cases:
                if self._true(self.ev(item.predicate, env, nxt)):
                    return self.ev(item.expression, env, nxt)
            if node.other is None:
                raise Unsupported("no CASE arm applies and there is no OTHER")
            return self.ev(node.other, env, nxt)
        if s == "let":
            return self.ev(node.expression, self._let(node.definitions, env, nxt), nxt)
        if s == "quantification":
            values = (
                self._true(self.ev(node.predicate, b, nxt))
                for b in self._bind(node.declarations, env, nxt)
            )
            if node.quantifier == "\\A":
                return all(values)
            if node.quantifier == "\\E":
                return any(values)
            raise Unsupported(f"quantifier {node.quantifier}")
        if s in ("vertical_list", "vertical_item"):
            return self._junction(node, env, nxt)
        if s == "operator_application":
            return self._apply(node, env, nxt)
        raise Unsupported(f"expression {s}")

    def _junction(self, node: Any, env: dict[str, Any], nxt: dict[str, Any] | None) -> bool:
        if node.symbol == "vertical_item":
            return self._true(self.ev(node.expression, env, nxt))
        items = (self._true(self.ev(i.expression, env, nxt)) for i in node.arguments)
        return all(items) if node.operator == "/\\" else any(items)

    @staticmethod
    def _true(v: Any) -> bool:
        if not isinstance(v, bool):
            raise Unsupported(f"a boolean was expected, got {v!r}")
        return v

    def _single(self, declarations: list[Any]) -> str:
        if len(declarations) != 1 or declarations[0].operator != "\\in":
            raise Unsupported("one bound name expected")
        return _name(declarations[0].arguments[0])

    def _bind(
        self, declarations: list[Any], env: dict[str, Any], nxt: dict[str, Any] | None
    ) -> Iterator[dict[str, Any]]:
        """Every binding of ``x, y \\in S, z \\in T`` (bare names share the next set)."""
        names: list[tuple[str, Any]] = []
        pending: list[str] = []
        for d in declarations:
            if d.symbol == "operator_application" and d.operator == "\\in":
                pending.append(_name(d.arguments[0]))
                domain = sorted(self.ev(d.arguments[1], env, nxt), key=repr)
                names += [(n, domain) for n in pending]
                pending = []
            else:
                pending.append(_name(d))
        if pending:
            raise Unsupported("an unbounded quantifier")
        for values in itertools.product(*(dom for _, dom in names)):
            yield {**env, **{n: v for (n, _), v in zip(names, values, strict=True)}}

    def _let(
        self, definitions: list[Any], env: dict[str, Any], nxt: dict[str, Any] | None
    ) -> dict[str, Any]:
        inner = dict(env)
        for d in definitions:
            if d.arity:
                raise Unsupported("a LET operator with parameters")
            inner[d.name] = self.ev(d.definiens, inner, nxt)
        return inner

    def _apply(self, node: Any, env: dict[str, Any], nxt: dict[str, Any] | None) -> Any:
        op, args = node.operator, node.arguments or []
        if not args:
            if op in env:
                return env[op]
            if op in self.constants:
                return self.constants[op]
            if op in self.defs and not self.defs[op].params:
                return self.ev(self.defs[op].body, env, nxt)
            raise Unsupported(f"unknown name {op}")
        if op == "'":
            var = _name(args[0])
            if nxt is None or var not in nxt:
                raise Unsupported(f"{var}' read before it is bound")
            return nxt[var]
        if op in self.defs:
            d = self.defs[op]
            values = [self.ev(a, env, nxt) for a in args]
            return self.ev(
                d.body, {**self._globals(env), **dict(zip(d.params, values, strict=True))}, nxt
            )
        if op == "~":
            return not self._true(self.ev(args[0], env, nxt))
        if op == "DOMAIN":
            f = self.ev(args[0], env, nxt)
            if not isinstance(f, Fn):
                raise Unsupported(f"DOMAIN of {f!r}")
            return f.domain()
        if op == "Cardinality" and len(args) == 1 and "FiniteSets" in self.extends:
            s = self.ev(args[0], env, nxt)
            if not isinstance(s, frozenset):
                raise Unsupported(f"Cardinality of {s!r}")
            return len(s)
        if op == "/\\":
            return all(self._true(self.ev(a, env, nxt)) for a in args)
        if op == "\\/":
            return any(self._true(self.ev(a, env, nxt)) for a in args)
        if op == "=>":
            return not self._true(self.ev(args[0], env, nxt)) or self._true(
                self.ev(args[1], env, nxt)
            )
        if len(args) != 2:
            raise Unsupported(f"operator {op} with {len(args)} arguments")
        a, b = (self.ev(x, env, nxt) for x in args)
        binary = {
            "=": lambda: a == b,
            "/=": lambda: a != b,
            "#": lambda: a != b,
            "\\in": lambda: a in b,
            "\\notin": lambda: a not in b,
            "\\cup": lambda: a | b,
            "\\cap": lambda: a & b,
            "\\": lambda: a - b,
            "\\subseteq": lambda: a <= b,
            "+": lambda: a + b,
            "-": lambda: a - b,
            "<": lambda: a < b,
            "<=": lambda: a <= b,
            "=<": lambda: a <= b,
            ">": lambda: a > b,
            ">=": lambda: a >= b,
            "..": lambda: frozenset(range(a, b + 1)),
        }
        if op not in binary:
            raise Unsupported(f"operator {op}")
        return binary[op]()

    def _globals(self, env: dict[str, Any]) -> dict[str, Any]:
        """What an operator's body sees of the caller's environment: the state variables
        (bound names of the caller are not in scope)."""
        return {v: env[v] for v in self.variables if v in env}

    # ---- actions --------------------------------------------------------------------------
    def successors(
        self, node: Any, env: dict[str, Any], nxt: dict[str, Any]
    ) -> Iterator[dict[str, Any]]:
        """Every assignment of the next state (extending ``nxt``) that satisfies the action
        ``node`` -- TLC's enumeration: conjuncts left to right, each disjunct and each
        witness of ``\\E`` an alternative, ``x' = e`` binding ``x'`` when it is unbound."""
        s = node.symbol
        if s == "parentheses":
            yield from self.successors(node.expression, env, nxt)
            return
        if s == "vertical_item":
            yield from self.successors(node.expression, env, nxt)
            return
        if s == "vertical_list" or (
            s == "operator_application" and node.operator in ("/\\", "\\/") and node.arguments
        ):
            parts = (
                [i.expression for i in node.arguments]
                if s == "vertical_list"
                else list(node.arguments)
            )
            if node.operator == "\\/":
                for p in parts:
                    yield from self.successors(p, env, nxt)
            else:
                yield from self._conjunction(parts, env, nxt)
            return
        if s == "quantification" and node.quantifier == "\\E":
            for b in self._bind(node.declarations, env, nxt):
                yield from self.successors(node.predicate, b, nxt)
            return
        if s == "let":
            yield from self.successors(node.expression, self._let(node.definitions, env, nxt), nxt)
            return
        if s == "if":
            branch = node.then if self._true(self.ev(node.predicate, env, nxt)) else node.else_
            yield from self.successors(branch, env, nxt)
            return
        if s == "operator_application":
            op, args = node.operator, node.arguments or []
            if op == "UNCHANGED":
                target = args[0]
                names = (
                    [_name(i) for i in target.items]
                    if target.symbol == "tuple"
                    else [_name(target)]
                )
                yield from self._assign([(n, env[n]) for n in names], nxt)
                return
            if op == "=" and args[0].symbol == "operator_application" and args[0].operator == "'":
                var = _name(args[0].arguments[0])
                if var not in nxt:
                    yield from self._assign([(var, self.ev(args[1], env, nxt))], nxt)
                    return
            if op in self.defs and op not in env:
                d = self.defs[op]
                values = [self.ev(a, env, nxt) for a in args]
                inner = {**self._globals(env), **dict(zip(d.params, values, strict=True))}
                yield from self.successors(d.body, inner, nxt)
                return
        if self._true(self.ev(node, env, nxt)):
            yield nxt

    def _conjunction(
        self, parts: list[Any], env: dict[str, Any], nxt: dict[str, Any]
    ) -> Iterator[dict[str, Any]]:
        if not parts:
            yield nxt
            return
        for n in self.successors(parts[0], env, nxt):
            yield from self._conjunction(parts[1:], env, n)

    @staticmethod
    def _assign(pairs: list[tuple[str, Any]], nxt: dict[str, Any]) -> Iterator[dict[str, Any]]:
        out = dict(nxt)
        for var, value in pairs:
            if var in out and out[var] != value:
                return
            out[var] = value
        yield out

    # ---- the state graph ------------------------------------------------------------------
    def initial_states(self, init: str = "Init") -> list[tuple[Any, ...]]:
        """Init read as an action whose primed variables are the state variables."""
        body = self.defs[init].body
        out = []
        for assignment in self._init(body, {}, {}):
            if set(assignment) != set(self.variables):
                raise Unsupported(f"Init leaves {set(self.variables) - set(assignment)} free")
            out.append(tuple(assignment[v] for v in self.variables))
        return out

    def _init(
        self, node: Any, env: dict[str, Any], bound: dict[str, Any]
    ) -> Iterator[dict[str, Any]]:
        parts = [i.expression for i in node.arguments] if node.symbol == "vertical_list" else [node]
        assignment = dict(bound)
        for p in parts:
            if p.symbol != "operator_application" or p.operator != "=":
                raise Unsupported("Init: only conjunctions of x = e")
            var = _name(p.arguments[0])
            if var not in self.variables or var in assignment:
                raise Unsupported(f"Init: {var} is not a free state variable")
            assignment[var] = self.ev(p.arguments[1], {**env, **assignment})
        yield assignment


def check(
    spec: Spec,
    invariant: str,
    actions: tuple[str, ...] = (),
    next_name: str = "Next",
    limit: int = 2_000_000,
    stop_at_violation: bool = False,
) -> Report:
    """Every state reachable from Init by Next (breadth first); ``invariant`` on each state,
    the action properties ``actions`` (e.g. ``groupEpoch' >= groupEpoch``) on each step.
    ``stop_at_violation``: return at the first violation (as TLC does), the counts partial."""
    start = spec.initial_states()
    seen = set(start)
    queue = deque(start)
    report = Report(0, 0, values={v: set() for v in spec.variables})
    nxt_def = spec.defs[next_name].body

    def state_env(state: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(spec.variables, state, strict=True))

    for s in start:
        if not spec.ev(spec.defs[invariant].body, state_env(s)):
            report.violations.append(f"{invariant} fails in an initial state")
    while queue:
        s = queue.popleft()
        env = state_env(s)
        for nxt in spec.successors(nxt_def, env, {}):
            if set(nxt) != set(spec.variables):
                raise Unsupported(f"a step leaves {set(spec.variables) - set(nxt)} unbound")
            report.transitions += 1
            t = tuple(nxt[v] for v in spec.variables)
            for a in actions:
                if not spec.ev(spec.defs[a].body, env, nxt) and len(report.violations) < 20:
                    report.violations.append(f"{a} fails: {env} -> {nxt}")
            if t in seen:
                continue
            seen.add(t)
            if len(seen) > limit:
                raise RuntimeError(f"more than {limit} states: bound the constants further")
            if not spec.ev(spec.defs[invariant].body, nxt) and len(report.violations) < 20:
                report.violations.append(f"{invariant} fails in {nxt}")
            if stop_at_violation and report.violations:
                break
            queue.append(t)
        if stop_at_violation and report.violations:
            break
    report.states = len(seen)
    for state in seen:
        for v, value in zip(spec.variables, state, strict=True):
            report.values[v].add(value)
    return report
