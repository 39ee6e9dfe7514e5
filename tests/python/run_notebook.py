"""Executes a notebook top to bottom on a real Jupyter kernel (nbclient);
any cell's error fails the run. Usage: run_notebook.py NOTEBOOK [OUT]"""

import sys
import time

import nbclient
import nbformat


def main() -> int:
    path = sys.argv[1]
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=False)
    start = time.monotonic()
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        print(f"{path}: a cell failed:\n{e}", file=sys.stderr)
        return 1
    finally:
        if len(sys.argv) > 2:
            nbformat.write(nb, sys.argv[2])
    for cell in nb.cells:
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream":
                    sys.stdout.write(out.get("text", ""))
    print(f"{path}: {sum(c.cell_type == 'code' for c in nb.cells)} code cells ran in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
