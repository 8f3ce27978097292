"""The length-generalisation benchmark: which position scheme keeps working beyond its training length?

After Kazemnejad et al., "The Impact of Positional Encoding on Length Generalization in
Transformers" (NeurIPS 2023; github.com/McGill-NLP/length-generalization): train one model per
(task, scheme, seed) on lengths ``1..train_max`` until it has learned them, test exact match on
every length up to about twice that, and compare the schemes with intervals and a ranking that
says which differences are significant.

One job per module:

* :mod:`.config` — :class:`CellConfig` (composes ModelConfig + TrainConfig) and the presets, one per task;
* :mod:`.cell` — :func:`train_cell`: one cell through the convergence gate, then tested;
* :mod:`.grid` — :func:`run_grid` / :func:`run_jobs`: every cell, shards, processes, resume;
* :mod:`.stats` — Wilson and bootstrap intervals, paired comparisons, ranks;
* :mod:`.summary` — cells → the report's numbers; :mod:`.report` — results.md/json, accuracy.png.

Tiny example (seconds on a CPU)::

    from posenc.lengthgen import QUICK, train_cell
    cell = train_cell("copy", "rope", seed=0, config=QUICK.with_changes(train={"steps": 50}))
    cell["learned"], cell["accuracy"]["1"]
"""

from posenc.lengthgen.cell import build_model, hits_by_length, plan_cell, position_options, train_cell, valid_lengths
from posenc.lengthgen.config import (DEFAULT, NEW_SCHEMES, PAPER_SCHEMES, PRESETS, QUICK, SCHEMES, TASK_LENGTHS, TASKS, CellConfig,
                                     preset)
from posenc.lengthgen.grid import GridConfig, cell_name, load_cells, machine_note, run_grid, run_jobs
from posenc.lengthgen.report import headline, markdown, plot, write_report
from posenc.lengthgen.summary import summarise
from posenc.positions import canonical

__all__ = [
    "DEFAULT", "NEW_SCHEMES", "PAPER_SCHEMES", "PRESETS", "QUICK", "SCHEMES", "TASKS", "TASK_LENGTHS", "CellConfig", "GridConfig",
    "build_model", "canonical", "cell_name", "headline", "hits_by_length", "load_cells", "machine_note",
    "markdown", "plan_cell", "plot", "position_options", "preset", "run_grid", "run_jobs", "summarise", "train_cell", "valid_lengths",
    "write_report",
]
