"""A PNG of one field of a job's steps.jsonl against the step: each step's value (thin) and the mean
of the last --window steps (thick). Needs Pillow (in the project's venv: tools/python.sh).

  tools/python.sh tools/plot_steps.py OUTPUT_DIR/steps.jsonl --field reward --out reward.png
"""
import argparse
import json
import math
import sys

from PIL import Image, ImageDraw

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 360, 56, 16, 28, 36


def read(path, field):
    steps, values = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if n == len(lines):  # An unfinished last line: the job is writing it.
                continue
            sys.exit(f"{path}:{n}: not JSON")
        value = record.get(field) if isinstance(record, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not isinstance(record.get("step"), int):
            continue
        try:
            value = float(value)
        except OverflowError:
            continue
        if math.isfinite(value):
            steps.append(record["step"])
            values.append(value)
    if not values:
        sys.exit(f"{path}: no step line has a number named {field!r}")
    return steps, values


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps_jsonl")
    parser.add_argument("--field", default="loss")
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    steps, values = read(args.steps_jsonl, args.field)
    window = max(1, args.window)
    means = [sum(values[max(0, i - window + 1):i + 1]) / (i - max(0, i - window + 1) + 1) for i in range(len(values))]
    lo, hi = min(values), max(values)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    first, last = steps[0], max(steps[-1], steps[0] + 1)

    def xy(step, value):
        x = LEFT + (step - first) / (last - first) * (WIDTH - LEFT - RIGHT)
        y = TOP + (hi - value) / (hi - lo) * (HEIGHT - TOP - BOTTOM)
        return x, y

    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle([LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM], outline="black")
    for k in range(5):  # Grid lines and their values.
        value = lo + (hi - lo) * k / 4
        _, y = xy(first, value)
        draw.line([LEFT, y, WIDTH - RIGHT, y], fill=(225, 225, 225))
        draw.text((4, y - 6), f"{value:.3g}", fill="black")
    for k in range(5):
        step = first + (last - first) * k / 4
        x, _ = xy(step, lo)
        draw.text((x - 8, HEIGHT - BOTTOM + 6), f"{step:.0f}", fill="black")
    draw.line([xy(s, v) for s, v in zip(steps, values)], fill=(150, 180, 230), width=1)
    draw.line([xy(s, v) for s, v in zip(steps, means)], fill=(20, 70, 180), width=3)
    draw.text((LEFT, 8), f"{args.field} per step (thin) and its mean over {window} steps (thick)", fill="black")
    draw.text((WIDTH // 2 - 12, HEIGHT - 16), "step", fill="black")
    image.save(args.out)
    print(f"wrote {args.out}: {len(values)} steps, {args.field} {values[0]:.4g} -> {values[-1]:.4g} "
          f"(mean of the first {window}: {sum(values[:window]) / len(values[:window]):.4g}, "
          f"of the last {window}: {sum(values[-window:]) / len(values[-window:]):.4g})")


if __name__ == "__main__":
    main()
