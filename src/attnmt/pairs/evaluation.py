"""The scores of a sentence-pair classifier: accuracy, per-class precision, recall and F1, their
macro average and the confusion matrix, and these as a text table."""

from __future__ import annotations

from attnmt.core.scoring import check_parallel


def classification_report(gold: list[str], predicted: list[str], labels: list[str]) -> dict:
    """Accuracy, per-class precision, recall and F1 (with the class's support, its gold count),
    their macro average, and the confusion matrix (rows: gold labels, columns: predicted, in the
    order of ``labels``) of a classifier's predictions. Fractions from 0 to 1."""
    n = check_parallel(gold=gold, predicted=predicted)
    index = {label: i for i, label in enumerate(labels)}
    confusion = [[0] * len(labels) for _ in labels]
    for g, p in zip(gold, predicted):
        confusion[index[g]][index[p]] += 1
    per_class = {}
    for i, label in enumerate(labels):
        hits, support, chosen = confusion[i][i], sum(confusion[i]), sum(row[i] for row in confusion)
        precision, recall = _ratio(hits, chosen), _ratio(hits, support)
        per_class[label] = {
            "precision": precision,
            "recall": recall,
            "f1": _ratio(2 * precision * recall, precision + recall),
            "support": support,
        }
    macro_f1 = sum(c["f1"] for c in per_class.values()) / len(labels)
    return {
        "accuracy": sum(confusion[i][i] for i in range(len(labels))) / n,
        "pairs": n,
        "labels": list(labels),
        "per_class": per_class,
        "macro_f1": macro_f1,
        "confusion": confusion,
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def percent(x: float) -> str:
    return f"{100 * x:.2f}%".rjust(9)


def format_classification_report(report: dict) -> str:
    """A classification_report as text: accuracy, a table of the classes, the confusion matrix."""
    labels = report["labels"]
    width = max(len(label) for label in labels + ["macro average"])
    lines = [
        f"accuracy {100 * report['accuracy']:.2f}%  ({report['pairs']} pairs)",
        "",
        f"{'class'.ljust(width)} | precision |    recall |        F1 | support",
        "-" * (width + 42),
    ]
    for label, c in report["per_class"].items():
        lines.append(
            f"{label.ljust(width)} | {percent(c['precision'])} | {percent(c['recall'])} | "
            f"{percent(c['f1'])} | {c['support']:7d}"
        )
    lines += [
        f"{'macro average'.ljust(width)} | {'':9} | {'':9} | {percent(report['macro_f1'])} |",
        "",
        "confusion matrix (rows: gold, columns: predicted)",
    ]
    cell = max(len(label) for label in labels + [str(v) for row in report["confusion"] for v in row])
    lines.append(" " * (width + 2) + " ".join(label.rjust(cell) for label in labels))
    for label, row in zip(labels, report["confusion"]):
        lines.append(f"{label.ljust(width)}  " + " ".join(str(v).rjust(cell) for v in row))
    return "\n".join(lines)
