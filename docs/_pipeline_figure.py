"""The picture of the float multi-head pipeline, ``docs/multi_head_pipeline.svg`` (not a page).

Run from the repository root (needs matplotlib)::

    python docs/_pipeline_figure.py

:data:`STAGES` lists the stages in the order ``learn_float`` calls them
(``verified_attn/multi_head/pipeline/learner.py``); ``tests/test_doc_tables.py`` checks
that order against the learner's source.

>>> [s[1] for s in STAGES][:3]
['plan', 'design_stage', 'ask_zero']
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parent / "multi_head_pipeline.svg"

#: (label, function learn_float calls, module, what the stage adds to the state).
STAGES: list[tuple[str, str, str, str]] = [
    ("plan", "plan", "budget", "bound, ratio grid"),
    ("design", "design_stage", "design", "U, B (orthogonal)"),
    ("F(0)", "ask_zero", "asking", "F_j(0)"),
    ("pilot", "pilot_stage", "pilot", "u scale a"),
    ("grid", "ask_grid", "asking", "F_kj(t)"),
    ("u-group fits", "fit_stage", "fits", "r_k, s_kj"),
    ("restarts", "restart_stage", "repairs", "stalled groups"),
    ("decoding", "decode_stage", "decode", "W_h, v_h (c_h)"),
    ("conditioning", "conditioning_stage", "conditioning", "failing groups again"),
    ("polish", "polish_stage", "polish", "error figures"),
    ("refinement", "refine_stage", "refine", "sequences, GN"),
    ("verification", "verify_stage", "verify", "every answer"),
    ("result", "result_stage", "result", "certificate"),
]


def draw(out: Path = OUT) -> Path:
    """Draw :data:`STAGES` as two rows of boxes (a snake), with the loops, as SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    matplotlib.rcParams["svg.hashsalt"] = "verified-attn"  # the same file on every run
    per_row, w, h, gap = -(-len(STAGES) // 2), 1.55, 0.78, 0.45
    fig, ax = plt.subplots(figsize=(11.5 * per_row / 6, 3.6))
    centres = []
    for i, (label, _, module, adds) in enumerate(STAGES):
        row, col = divmod(i, per_row)
        col = col if row == 0 else per_row - 1 - col  # the second row runs back
        x, y = col * (w + gap), -row * 1.7
        centres.append((x + w / 2, y + h / 2))
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04",
                                    fc="#e8f0fb" if i % 2 == 0 else "#f4f4f4", ec="#345"))
        ax.text(x + w / 2, y + 0.56, label, ha="center", va="center", fontsize=10,
                weight="bold")
        ax.text(x + w / 2, y + 0.34, f"{module}.py", ha="center", va="center", fontsize=7.5,
                family="monospace", color="#345")
        ax.text(x + w / 2, y + 0.13, adds, ha="center", va="center", fontsize=7.5)

    def arrow(a: int, b: int, text: str = "", rad: float = 0.0) -> None:
        (x0, y0), (x1, y1) = centres[a], centres[b]
        if y0 == y1:  # along a row: edge to edge
            dx = (w / 2 + 0.05) * (1 if x1 > x0 else -1)
            start, end = (x0 + dx, y0), (x1 - dx, y1)
        else:  # down from the end of the first row, or a loop between rows
            start, end = (x0, y0 - h / 2 - 0.05), (x1, y1 + h / 2 + 0.05)
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12,
                                     connectionstyle=f"arc3,rad={rad}", color="#234"))
        if text:
            ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.32 * (rad or 1),
                    text, ha="center", fontsize=7.5, style="italic", color="#234")

    for i in range(len(STAGES) - 1):
        arrow(i, i + 1)
    px, py = centres[3]  # the pilot's rounds: rescale u, ask its pairs again
    ax.add_patch(FancyArrowPatch((px + 0.35, py + h / 2 + 0.05), (px - 0.35, py + h / 2 + 0.05),
                                 arrowstyle="-|>", mutation_scale=12, color="#234",
                                 connectionstyle="arc3,rad=0.8"))
    ax.text(px, py + h / 2 + 0.42, "rescale u, ask again", ha="center", fontsize=7.5,
            style="italic", color="#234")
    (cx, cy), (fx, fy) = centres[8], centres[5]  # conditioning: fits, restarts, decoding again
    ax.add_patch(FancyArrowPatch((cx + 0.3, cy + h / 2 + 0.05), (fx - 0.45, fy - h / 2 - 0.05),
                                 arrowstyle="-|>", mutation_scale=12, color="#234",
                                 connectionstyle="arc3,rad=-0.15"))
    ax.text((cx + fx) / 2 + 0.2, (cy + fy) / 2 - 0.05, "ask failing groups again, refit",
            ha="center", fontsize=7.5, style="italic", color="#234", rotation=8)
    ax.set_xlim(-0.2, per_row * (w + gap))
    ax.set_ylim(-2.0, 1.45)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(draw())
