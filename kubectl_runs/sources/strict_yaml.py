"""YAML as the API server reads it: the C safe loader, refusing a mapping key given twice.

YAML says the keys of a mapping are unique, and the API server refuses a manifest that repeats one; PyYAML
silently keeps the last value, so ``concurrency: 1`` followed by ``concurrency: 64`` would read as 64. The check
costs one set per mapping (a mapping whose keys are unique, which is every mapping of a good file, is never
looked at twice).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_MERGE_TAG = "tag:yaml.org,2002:merge"
# What the API server reads as a float (sigs.k8s.io/yaml, go-yaml's yamlStyleFloat; YAML 1.2's core schema
# agrees): PyYAML's YAML 1.1 wants a dot and a signed exponent, so it reads 1e30, 1E+9 or 5e-1 as strings.
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The C safe loader, refusing a mapping key given twice (YAML says keys are unique; the API server refuses
    such a manifest, where PyYAML would silently keep the last value), and reading numbers with an exponent
    (``1e30``) as floats, as the API server does — so ``concurrency: 1e30`` is refused as a float, like
    ``1.0e+30`` and JSON's ``1e30``, not as a string."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            pairs = node.value
            try:
                unique = len({key.value for key, _value in pairs}) == len(pairs)
            except TypeError:  # a key that is itself a collection: look closer
                unique = False
            if not unique:
                _refuse_duplicate_keys(pairs)
        return super().construct_mapping(node, deep)


def _refuse_duplicate_keys(pairs: list[tuple[Any, Any]]) -> None:
    first: dict[str, Any] = {}
    for key, _value in pairs:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        seen = first.setdefault(key.value, key)
        if seen is not key:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key.value!r} (first given at line {seen.start_mark.line + 1})",
                key.start_mark)




# Integers are resolved first (``8`` stays an int); this adds the exponent forms YAML 1.1 leaves as strings.
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
