"""The core family: a factor pair (or a chain of L factors) W = A Bᵀ on the problems of
docs/theory.md. Its config (:mod:`.config`, :mod:`.vocabulary`, :mod:`.depth_rules`),
problems (:mod:`.problems`), factors of any depth (:mod:`.factors`), observables
(:mod:`.observables`), vector fields and noise terms (:mod:`.fields`), optimizers
(:mod:`.optimizers`), the compiled program (:mod:`.program`), the family the engine runs
(:mod:`.family`) and strong-order measurements (:mod:`.convergence`)."""
