"""The core family's dynamics: :mod:`~rankflow.core.dynamics.vector_fields` holds the
vector fields of the flows of docs/theory.md and their noise terms, as diffrax terms."""
