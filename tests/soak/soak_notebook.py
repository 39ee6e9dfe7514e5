"""Runs soak_notebook.ipynb on a real Jupyter kernel (nbclient) with no cell
timeout: the notebook's loop ends at its deadline. The kernel inherits this
process's environment (FERRY_SOAK_DIR, FERRY_SOAK_ARGS) and its stderr, where
the runtime's log lines go (once: the cells' outputs, which hold them again,
are not printed). Usage: soak_notebook.py NOTEBOOK"""

import sys

import nbclient
import nbformat


def main() -> int:
    nb = nbformat.read(sys.argv[1], as_version=4)
    client = nbclient.NotebookClient(nb, timeout=None, kernel_name="python3", allow_errors=False)
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        print(f"soak notebook: a cell failed:\n{e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
