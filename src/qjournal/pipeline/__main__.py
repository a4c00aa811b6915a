"""Entry point for ``python -m qjournal.pipeline`` and ``spark-submit src/qjournal/pipeline/__main__.py``.

Why a separate file: ``spark-submit`` runs a Python *file*; this one only
imports the installed package (so the executors, which run the same
interpreter through ``PYSPARK_PYTHON``, find the decoder) and delegates to
:func:`qjournal.pipeline.run.main`. Under spark-submit set ``PYSPARK_PYTHON``
(and ``PYSPARK_DRIVER_PYTHON``) to the project's interpreter, e.g.
``PYSPARK_PYTHON=.venv/bin/python spark-submit --master local[2]
src/qjournal/pipeline/__main__.py all --journal-dirs … --out …``.
"""

import sys

from qjournal.pipeline.run import main

if __name__ == "__main__":
    sys.exit(main())
