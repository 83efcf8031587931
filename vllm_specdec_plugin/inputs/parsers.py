"""Bounded YAML and JSON parsing of outside input, with errors that name the input.

Every parser of outside input parses through here (reading through `inputs/files.py`); the
bounds themselves are `core/limits.py`. What comes back is plain data (dicts, lists, strings,
finite numbers, booleans, None), no deeper than `MAX_DEPTH`, no bigger after alias expansion than
the limits allow, so nothing downstream (`json.dumps`, `dataclasses.asdict`, an error message)
can blow it up.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import yaml

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import (
    MAX_DEPTH,
    MAX_FLOAT_CHARS,
    MAX_INT_DIGITS,
    MAX_JSON_TEXT_BYTES,
    MAX_YAML_EXPANDED_CHARS,
    MAX_YAML_NODES,
    int_too_large,
    json_depth,
)

# --- YAML ----------------------------------------------------------------------------------


class _Bound(Exception):
    """An input over one of the limits: the problem and, for YAML, where it was found."""

    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.mark = mark


class _CountingComposer(yaml.composer.Composer):
    """YAML's composer, counting what it composes: nesting depth, nodes and scalar text, an
    alias counted as everything it repeats, so a document of nested aliases (a "billion
    laughs") is refused after composing about `MAX_YAML_NODES` nodes, before anything
    expands it."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._nodes = 0
        self._chars = 0
        self._expanded: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[attr-defined]  # the parser's
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._expanded.get(id(node))
            if size is None:
                raise _Bound("an alias refers to the collection it is in (a recursive "
                             "alias)", event.start_mark)
            self._count(*size, event.start_mark)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Bound(f"it nests deeper than {MAX_DEPTH} levels", event.start_mark)
        before = (self._nodes, self._chars)
        self._count(1, len(getattr(event, "value", "") or ""), event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._expanded[id(node)] = (self._nodes - before[0], self._chars - before[1])
        return node

    def _count(self, nodes: int, chars: int, mark: Any) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > MAX_YAML_NODES:
            raise _Bound(f"it has more than {MAX_YAML_NODES} nodes (aliases counted as what "
                         "they repeat)", mark)
        if self._chars > MAX_YAML_EXPANDED_CHARS:
            raise _Bound(f"its text is more than {MAX_YAML_EXPANDED_CHARS} characters (aliases "
                         "counted as what they repeat)", mark)


class _BoundedConstructor(yaml.constructor.SafeConstructor):
    """`SafeConstructor` with integers and floats bounded (digits, NaN/Infinity refused) and
    timestamps kept as their text (a flag value, and `2001-02-30` is no ValueError)."""


def _bounded_int(loader: Any, node: yaml.ScalarNode) -> int:
    digits = str(node.value).lstrip("+-").replace("_", "")
    if len(digits) > MAX_INT_DIGITS + 2:  # room for a 0x / 0b / 0o prefix
        raise _Bound(f"the integer {quote_value(node.value)} has more than {MAX_INT_DIGITS} "
                     "digits", node.start_mark)
    value: int = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
    if int_too_large(value):
        raise _Bound(f"the integer {quote_value(node.value)} has more than {MAX_INT_DIGITS} "
                     "digits", node.start_mark)
    return value


def _bounded_float(loader: Any, node: yaml.ScalarNode) -> float:
    if len(str(node.value)) > MAX_FLOAT_CHARS:
        raise _Bound(f"the number {quote_value(node.value)} is longer than {MAX_FLOAT_CHARS} "
                     "characters", node.start_mark)
    value: float = yaml.constructor.SafeConstructor.construct_yaml_float(loader, node)
    if not math.isfinite(value):
        raise _Bound(f"{quote_value(node.value)} is not a finite number (NaN and infinity "
                     "are refused)", node.start_mark)
    return value


def _timestamp_as_text(loader: Any, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


_BoundedConstructor.add_constructor("tag:yaml.org,2002:int", _bounded_int)
_BoundedConstructor.add_constructor("tag:yaml.org,2002:float", _bounded_float)
_BoundedConstructor.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


class PyBoundedLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
                      _CountingComposer, _BoundedConstructor, yaml.resolver.Resolver):
    """`yaml.SafeLoader`'s layout with the counting composer and the bounded constructor."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        _CountingComposer.__init__(self)
        _BoundedConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)


def _libyaml_loader() -> type | None:
    """The same loader on libyaml's parser (about 8x faster on a 1 MiB document); the
    composition, where the bounds are counted, stays the Python composer's. None where PyYAML
    was built without libyaml."""
    try:
        from yaml import cyaml
    except ImportError:
        return None
    parser: Any = getattr(cyaml, "CParser", None)
    if parser is None:
        return None

    def __init__(self: Any, stream: str) -> None:
        parser.__init__(self, stream)
        _CountingComposer.__init__(self)
        _BoundedConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)

    return type("CBoundedLoader",
                (_CountingComposer, parser, _BoundedConstructor, yaml.resolver.Resolver),
                {"__init__": __init__, "__doc__": _libyaml_loader.__doc__})


BoundedLoader: type = _libyaml_loader() or PyBoundedLoader


def load_yaml(text: str, source: str, fix: str) -> Any:
    """One YAML document (safe tags only, bounded), with errors that name the input, the
    line and the fix."""
    loader = None
    try:
        loader = BoundedLoader(text)  # its reader refuses control characters right away
        document = loader.get_single_data()
    except _Bound as exc:
        where = f"{source}:{exc.mark.line + 1}" if exc.mark is not None else source
        raise SpecDecodeConfigError(f"{where} is refused: {exc.problem}; {fix}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise SpecDecodeConfigError(f"{where} is not valid YAML ({problem}); {fix}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise SpecDecodeConfigError(
            f"{source} is not valid YAML ({type(exc).__name__}: {quote_value(str(exc))}); "
            f"{fix}") from None
    finally:
        if loader is not None:
            loader.dispose()
    check_plain(document, source, fix)
    return document


# --- JSON ----------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise _Bound(f"{name} is not a JSON number (NaN and Infinity are refused)")


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Bound(f"the integer {quote_value(text)} has more than {MAX_INT_DIGITS} digits")
    return int(text)


def _json_float(text: str) -> float:
    if len(text) > MAX_FLOAT_CHARS:
        raise _Bound(f"the number {quote_value(text)} is longer than {MAX_FLOAT_CHARS} "
                     "characters")
    value = float(text)
    if not math.isfinite(value):
        raise _Bound(f"the number {quote_value(text)} is not finite (it overflows to infinity)")
    return value


def load_json(text: str, source: str, fix: str, limit: int = MAX_JSON_TEXT_BYTES) -> Any:
    """`json.loads` bounded: size, nesting (checked before parsing, without recursion),
    integer digits, finite numbers only (NaN / Infinity refused); errors name `source`."""
    if len(text) > limit:
        raise SpecDecodeConfigError(
            f"{source} is refused: it is {len(text)} characters long (at most {limit}); {fix}")
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise SpecDecodeConfigError(
            f"{source} is refused: it nests {depth} levels deep (at most {MAX_DEPTH}); {fix}")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_int=_json_int,
                          parse_float=_json_float)
    except _Bound as exc:
        raise SpecDecodeConfigError(f"{source} is refused: {exc.problem}; {fix}") from None
    except json.JSONDecodeError as exc:
        raise SpecDecodeConfigError(
            f"{source} is not valid JSON ({exc.msg} at char {exc.pos}): {quote_value(text)}; "
            f"{fix}") from None
    except (ValueError, RecursionError) as exc:
        raise SpecDecodeConfigError(
            f"{source} is not valid JSON ({type(exc).__name__}); {fix}") from None


# --- plain data ----------------------------------------------------------------------------

_SCALARS = (str, int, float, bool, type(None))


def check_plain(value: Any, source: str, fix: str) -> None:
    """Refuse what JSON cannot carry or what a bound forbids, anywhere in `value`: types other
    than dict/list/str/number/bool/None (YAML's !!binary, !!set), non-finite floats, integers
    over `MAX_INT_DIGITS` digits, nesting over `MAX_DEPTH` (a cycle included). Walked with an
    explicit stack, never recursively."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        at = f" at {quote_value(where)}" if where else ""
        if depth > MAX_DEPTH:
            raise SpecDecodeConfigError(
                f"{source} is refused: it nests deeper than {MAX_DEPTH} levels{at}; {fix}")
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, int):
            if int_too_large(item):
                raise SpecDecodeConfigError(
                    f"{source} is refused: an integer{at} has more than {MAX_INT_DIGITS} "
                    f"digits; {fix}")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise SpecDecodeConfigError(
                    f"{source} is refused: {item!r}{at} is not a finite number (NaN and "
                    f"infinity are refused); {fix}")
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if not isinstance(key, _SCALARS):
                    raise SpecDecodeConfigError(
                        f"{source} is refused: a key{at} is a {type(key).__name__}, not a "
                        f"string; {fix}")
                stack.append((child, f"{where}.{key}" if where else str(key), depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
        else:
            raise SpecDecodeConfigError(
                f"{source} is refused: a value{at} is a {type(item).__name__}, which JSON "
                f"cannot carry; {fix}")
