"""Declarative config validation, shared by the horizontal and the vertical app.

A config is checked against :class:`Rule` s, in order: each names a key, the
:class:`Constraint` its value must meet (what is allowed, in words, and the test) and
optionally when the rule applies. :func:`check` raises one :class:`ConfigError` for the
first value that fails, naming the key, what is allowed and the value, before any
private data is touched. The constraints are small and composable (:func:`one_of`,
:func:`at_least`, :func:`interval`, :func:`positive`, :func:`auto_or`); a rule whose
condition involves several keys gives its own test.

The rules sit beside their key: a dataclass field declared with :func:`key` carries its
default and its rules (as scikit-learn's ``_parameter_constraints``), and
:func:`check_keys` checks a section's fields in declaration order. A table of
:func:`require` rows does the same for a config without such fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["ConfigError", "Constraint", "Dependent", "Rule", "at_least", "auto_or", "check",
           "check_keys", "interval", "key", "never", "one_of", "positive", "require", "when"]


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range."""


@dataclass(frozen=True)
class Constraint:
    """What a value must be: a test and its description ("an integer >= 1")."""

    test: Callable[[Any], bool]
    text: str

    def __call__(self, value: Any) -> bool:
        """Whether ``value`` meets the constraint."""
        return bool(self.test(value))


@dataclass(frozen=True)
class Dependent:
    """A constraint that depends on other keys: ``make(config) -> Constraint``."""

    make: Callable[[Any], Constraint]


@dataclass(frozen=True)
class Rule:
    """One row of a validation table.

    Attributes
    ----------
    key : str
        The config key the error names (``privacy.epsilon``).
    constraint : Constraint or Dependent
        Tested on ``value(config)`` (a :class:`Dependent` is built from the config
        first, e.g. a range that ends at another key's value).
    value : callable
        ``value(config)``: the value to test (and to print).
    when : callable or None
        ``when(config)``: the rule applies only if true.
    """

    key: str
    constraint: Constraint | Dependent
    value: Callable[[Any], Any]
    when: Callable[[Any], bool] | None = None


def require(key: str, constraint: Constraint | Dependent, value: Callable[[Any], Any],
            when: Callable[[Any], bool] | None = None) -> Rule:
    """A :class:`Rule` (reads like the table it builds)."""
    return Rule(key, constraint, value, when)


def when(condition: Callable[[Any], bool], constraint: Constraint | Dependent,
         value: Callable[[Any], Any] | None = None) -> Rule:
    """A rule of a :func:`key` that applies only when ``condition(config)`` holds.

    ``value(config)``: what the error prints (default: the key's value).
    """
    return Rule("", constraint, value, condition)  # type: ignore[arg-type]


def key(default: Any, *rules: Constraint | Dependent | Rule, **meta: Any) -> Any:
    """A dataclass field that is a config key: its default and its rules, in order.

    Parameters
    ----------
    default
        The key's default value.
    *rules : Constraint, Dependent or Rule
        What the value must be; a :func:`when` rule applies only under its condition.
    **meta
        More facts about the key, kept in the field's metadata (read by the config).
    """
    return field(default=default, metadata={"rules": rules, **meta})


def check_keys(config: Any, section: Any, prefix: str = "") -> None:
    """Check the :func:`key` rules of ``section``'s fields (``prefix`` + dashed name).

    Raises
    ------
    ConfigError
        For the first value that breaks a rule.
    """
    for f in fields(section):
        name = prefix + f.name.replace("_", "-")
        for rule in f.metadata.get("rules", ()):
            if not isinstance(rule, Rule):
                rule = Rule(name, rule, None)  # type: ignore[arg-type]
            value = rule.value or (lambda c, n=f.name: getattr(section, n))
            check(config, [Rule(rule.key or name, rule.constraint, value, rule.when)])


def check(config: Any, rules: Iterable[Rule]) -> None:
    """Raise :class:`ConfigError` for the first rule ``config`` breaks."""
    for rule in rules:
        if rule.when is not None and not rule.when(config):
            continue
        value = rule.value(config)
        constraint = rule.constraint
        if isinstance(constraint, Dependent):
            constraint = constraint.make(config)
        if not constraint(value):
            raise ConfigError(
                f"config key '{rule.key}' must be {constraint.text}, got {value!r}")


def one_of(values: Sequence[Any], note: str = "") -> Constraint:
    """The value is one of ``values``."""
    values = tuple(values)
    return Constraint(lambda v: v in values, f"one of {values}{note}")


def at_least(minimum: int, kind: str = "an integer", note: str = "") -> Constraint:
    """``value >= minimum``."""
    return Constraint(lambda v: v >= minimum, f"{kind} >= {minimum}{note}")


def interval(low: float, high: float, *, kind: str = "a float", low_open: bool = True,
             high_open: bool = False, note: str = "") -> Constraint:
    """``value`` in the interval, e.g. ``(0, 1]`` (``low_open``, not ``high_open``)."""

    def test(v: Any) -> bool:
        above = v > low if low_open else v >= low
        below = v < high if high_open else v <= high
        return above and below

    brackets = ("(" if low_open else "[", ")" if high_open else "]")
    return Constraint(test, f"{kind} in {brackets[0]}{low:g}, {high:g}{brackets[1]}{note}")


def positive(text: str = "a finite float > 0") -> Constraint:
    """A finite number > 0."""
    return Constraint(lambda v: math.isfinite(v) and v > 0, text)


def never(text: str) -> Constraint:
    """No value is allowed (for a rule whose ``when`` is the forbidden combination)."""
    return Constraint(lambda v: False, text)


def auto_or(constraint: Constraint, auto: str = "auto") -> Constraint:
    """``auto``, or a value meeting ``constraint``."""
    return Constraint(lambda v: v == auto or constraint(v), f"'{auto}' or {constraint.text}")
