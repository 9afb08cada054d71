"""Reproduce the experiments of the paper's section 5 (Tran, Kim & Doshi-Velez, 2016).

Usage::

    python demos/paper.py [deterministic|ring|grid|chain|synthetic|real|all]
                          [--quick] [--out DIR] [--reps R] [--seed S]

The same as ``streamspec paper ...``; the logic lives in :mod:`streamspec.experiments.paper`
and its ``paper_*`` siblings.
Writes one Markdown table (``<experiment>.md``), the raw results
(``<experiment>.json``) and, where the paper has a figure, a PNG into ``--out``
(default ``out/paper``).
"""

from __future__ import annotations

import sys

from streamspec.experiments.paper import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
