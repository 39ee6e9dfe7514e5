"""The last lines of every test that failed, from ctest's LastTest.log:
what CI shows of a long run is its beginning and its end, and a failed
test's reason sits in the middle (scripts/run prints this after ctest).

    python3 scripts/failed_tests.py BUILD/Testing/Temporary/LastTest.log [LINES]
"""
import re
import sys

BLOCK = re.compile(r"^\d+/\d+ Testing: (?P<name>.+?)\n.*?^Output:\n-+\n(?P<output>.*?)<end of output>\n.*?"
                   r"^Test (?!time)(?P<status>[^\n]+)\n", re.S | re.M)


def main() -> int:
    log = open(sys.argv[1], errors="replace").read()
    keep = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    for m in BLOCK.finditer(log):
        status = m["status"].strip()
        if status.startswith("Passed") or "Skipped" in status:
            continue
        lines = m["output"].rstrip("\n").splitlines()
        print(f"== {m['name']}: {status} (its last {min(keep, len(lines))} of {len(lines)} lines)")
        for line in lines[-keep:]:
            print("   " + line[:400])
    return 0


if __name__ == "__main__":
    sys.exit(main())
