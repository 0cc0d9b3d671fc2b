"""The config language every family uses: typed fields with their defaults, allowed values
and help (:mod:`.fields`), a family's config declared once as a :class:`Schema`
(:mod:`.schema`: resolve, expand, structure key, JSON), dotted keys and ``--set``, a
``[sweep]``'s points (:mod:`.points`), callables named in a config (:mod:`.callables`)
and the configs shipped with rankflow (:mod:`.resources`). Nothing here knows a family."""

from .fields import ConfigError as ConfigError
from .fields import Field as Field
from .schema import Schema as Schema

__all__ = ["ConfigError", "Field", "Schema"]
