"""What the picture checks share: a list of problems and a tool run that must succeed."""
import subprocess

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def finish(summary):
    """Exit status 1 with every problem listed, or 0 with the summary."""
    if problems:
        print("\n".join(problems))
        return 1
    print(summary)
    return 0


def run(cmd):
    """The command's standard output; exits with its output when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def valid_schedules(explorer):
    """Every built-in schedule the explorer builds at p = 4, m = 8."""
    import json
    table = json.loads(run([explorer, "--schedule", "all", "--ranks", "4", "--microbatches", "8", "--format", "json"]))
    return [s["schedule"] for s in table["schedules"] if s["valid"]]
