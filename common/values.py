"""Value objects: dataclasses compared and hashed by value and never assigned after they are built.

They are plain slots dataclasses at run time, not `frozen=True` ones: CPython builds a frozen
dataclass through `object.__setattr__`, field by field (a core `Placement`: 7,550
instructions against 2,477 for plain slots; a daemon `ObservedTask`, built for every task of
every heartbeat: 1.9 against 0.66 us). The test suite makes every type in a module's
`VALUE_TYPES` write-once instead (tests/conftest.py), so an assignment anywhere a test
reaches fails CI as it would with `frozen=True`.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Decorates a value type (hashed by value: `unsafe_hash`, sound because nothing assigns to one).
value = dataclass(slots=True, unsafe_hash=True)
#: A value type that also orders by its fields, in their order.
ordered_value = dataclass(slots=True, unsafe_hash=True, order=True)
