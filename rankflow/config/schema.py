"""A family's config declared once: :class:`Schema`.

A family builds one :class:`Schema` from its sections of :class:`~.fields.Field` s and its
own rules (a cross-field ``validate`` of one point, the ``derive`` of its derived values,
its former key names, a per-sweep ``prepare``, the keys its program traces beyond the
traced fields). The schema provides every operation on that family's configs the engine,
the command and the Python API use: :meth:`~Schema.resolve`, :meth:`~Schema.expand`
(once per sweep), :meth:`~Schema.structure_key` (one rule for every family),
:meth:`~Schema.to_json`, :meth:`~Schema.flatten`, and its ``defaults``, ``all_keys``,
``numeric_keys`` and ``callables``. It is also the mapping of its sections (section name
→ field name → :class:`~.fields.Field`), so it goes wherever a ``Sections`` does.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from .callables import callable_identity
from .fields import (
    Field,
    Sections,
    copy_config,
    defaults_of,
    field,
    flatten,
    keys_of,
    read_config,
    structure_key,
    traced_keys,
)
from .points import Points, shared_base

__all__ = ["Schema"]

Point = dict[str, Any]


class Schema(Mapping[str, Mapping[str, Field]]):
    """A family's config: its sections of fields and its rules, and every operation on
    its configs (see the module docstring).

    ``validate(point)`` raises :class:`~.fields.ConfigError` on a point breaking a
    cross-field rule (changing nothing); ``derive(point[, prepared])`` fills a
    validated point's derived values in place and returns it, given what
    ``prepare(cfg)`` (where there is one) computed once for the whole sweep (the core
    family: sgd's batch pads of the swept ``dynamics.batch``). ``renamed``: former
    dotted keys → their new names (a one-line error naming the new one). ``traced_also``:
    the keys a point's program traces beside the traced fields (left out of its
    structure key; the core family: sgd's ``dynamics.batch``). ``warn``: functions
    shown the checked points of each resolved sweep (its warnings).

    Examples:
      >>> from rankflow.config.fields import NUM, STR, Field, gt, top_fields
      >>> toy = Schema(
      ...     {"": top_fields("seed"), "run": {
      ...         "eta": Field(NUM, 0.1, "step size", gt(0), traced=True),
      ...         "kind": Field(STR, "a", "kind")}},
      ...     validate=lambda point: None, derive=lambda point: point)
      >>> toy.all_keys, toy.numeric_keys
      (('seed', 'x64', 'name', 'run.eta', 'run.kind'), ('seed', 'run.eta'))
      >>> cfg = toy.resolve({"run": {"kind": "b"}}, {"sweep.run.eta": [0.1, 0.2]})
      >>> [point["run"]["eta"] for point in toy.expand(cfg)]
      [0.1, 0.2]
      >>> len({toy.structure_key(point) for point in toy.expand(cfg)})  # one program
      1
    """

    # Expansions of resolved configs kept for :meth:`expand` (the most recent ones).
    EXPANDED = 8

    def __init__(
        self,
        sections: Sections,
        *,
        validate: Callable[[Point], None],
        derive: Callable[..., Point],
        prepare: Callable[[Mapping[str, Any]], Any] | None = None,
        renamed: Mapping[str, str] | None = None,
        traced_also: Callable[[Mapping[str, Any]], Iterable[str]] | None = None,
        warn: Sequence[Callable[[list[Point]], None]] = (),
    ):
        self.sections = sections
        self.validate, self.derive, self.prepare = validate, derive, prepare
        self.renamed = dict(renamed or {})
        self.traced_also, self.warn = traced_also, tuple(warn)
        self.all_keys: tuple[str, ...] = keys_of(sections)
        # Traced inputs of the program (Field.traced): a sweep over them compiles once.
        self.numeric_keys: tuple[str, ...] = traced_keys(sections)
        self.defaults: dict[str, Any] = defaults_of(sections)
        # The fields that take a Python callable (a custom loss), in schema order.
        self.callables = tuple(k for k in self.all_keys if field(k, sections).callables)
        # id(resolved config) → (it, a copy as resolved, its Points): see expand.
        self._expanded: OrderedDict[int, tuple[Mapping, dict, Points]] = OrderedDict()

    # --- the mapping of sections ---------------------------------------------------------

    def __getitem__(self, section: str) -> Mapping[str, Field]:
        return self.sections[section]

    def __iter__(self) -> Iterator[str]:
        return iter(self.sections)

    def __len__(self) -> int:
        return len(self.sections)

    def __repr__(self) -> str:
        return f"Schema({len(self.all_keys)} keys in sections {list(self)})"

    # --- configs ---------------------------------------------------------------------------

    def resolve(
        self, source: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Load a config (a TOML path or a nested dict), apply the dotted-key
        ``overrides``, refuse former key names, fill the defaults and validate every
        point of the sweep (of a large sweep, its representatives:
        :meth:`~.points.Points.representatives`), so that no bad point surfaces after
        compiling. Returns the base config holding the derived values every point shares
        (:func:`~.points.shared_base`); its ``sweep`` table is validated, not expanded:
        :meth:`expand` gives its points, reusing this expansion."""
        cfg = read_config(source, overrides, self, self.renamed)
        points = self._points(cfg)
        checked = points.made(points.representatives())
        for warn in self.warn:
            warn(checked)
        base = shared_base(cfg, checked, self)
        self._expanded[id(base)] = (base, copy_config(base, self), points)
        while len(self._expanded) > self.EXPANDED:
            self._expanded.popitem(last=False)
        return base

    def expand(self, cfg: Mapping[str, Any]) -> Points:
        """The points of a resolved config: the product of its sweep lists (the first
        key slowest), each validated and its derived values filled, made on demand
        (:class:`~.points.Points`). A config :meth:`resolve` returned, unchanged since,
        is not expanded again: its points are the ones resolve validated (the same
        objects); any other config (or that one changed) is expanded anew."""
        hit = self._expanded.get(id(cfg))
        if hit is not None and hit[0] is cfg and hit[1] == cfg:
            self._expanded.move_to_end(id(cfg))
            return hit[2]
        return self._points(cfg)

    def _points(self, cfg: Mapping[str, Any]) -> Points:
        prepared = () if self.prepare is None else (self.prepare(cfg),)
        return Points(cfg, self, partial(self._finish, prepared), self.numeric_keys)

    def _finish(self, prepared: tuple, point: Point) -> Point:
        """A point validated, then its derived values filled (``prepared``: the sweep's)."""
        self.validate(point)
        return self.derive(point, *prepared)

    def structure_key(self, point: Mapping[str, Any]) -> str:
        """Everything of a point that shapes its program, as JSON: every key but the
        traced ones (the traced fields and ``traced_also``'s) and the free-form
        ``name``; a callable by its name and identity. Points with equal keys share one
        compiled program."""
        also = tuple(self.traced_also(point)) if self.traced_also is not None else ()
        return structure_key(point, self, (*self.numeric_keys, "name", *also))

    def to_json(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON copy of a config (what ``config.json`` holds and ``--resume`` hashes):
        each value as JSON reads it back, and a callable given for a field marked
        ``callables`` (a custom loss in the Python API), in the config or its sweep, as
        its identity (:func:`~.callables.callable_identity`)."""
        out = copy_config(cfg, self)
        sweep = out.get("sweep") or {}
        for key in self.callables:
            sec, _, name = key.rpartition(".")
            values = out[sec] if sec else out
            if callable(values.get(name)):
                values[name] = callable_identity(values[name])
            if key in sweep:
                sweep[key] = [callable_identity(v) if callable(v) else v for v in sweep[key]]
        return json.loads(json.dumps(out))

    def flatten(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """Nested config → ``{"dynamics.lam": 0.05, ...}`` (the sweep table excluded)."""
        return flatten(cfg, self)
