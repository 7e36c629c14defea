"""What a matplotlib figure draws, for the chart tests: every text, every legend, its subfigures."""

from __future__ import annotations

from matplotlib.text import Text


def figures_in(fig) -> list:
    """The figure and its subfigures, at any depth."""
    return [fig, *(inner for sub in fig.subfigs for inner in figures_in(sub))]


def texts_of(fig) -> list[Text]:
    """Every piece of text the figure draws: titles (its subfigures' too), axis labels, tick labels
    (of drawn ticks), value labels, colorbar ticks, legend texts."""
    found = [text for f in figures_in(fig) for text in [*f.texts, *([f._suptitle] if f._suptitle else [])]]
    for ax in fig.axes:
        found += [*ax.texts, ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis._update_ticks():
                found += [tick.label1, tick.label2]
            found.append(axis.offsetText)
    for legend in legends_of(fig):
        found += [*legend.get_texts(), legend.get_title()]
    unique = {id(t): t for t in found}  # a suptitle is one of its figure's texts too
    return [t for t in unique.values() if t.get_visible() and t.get_text().strip()]


def legends_of(fig) -> list:
    figure_legends = [legend for f in figures_in(fig) for legend in f.legends]
    return [legend for legend in [*figure_legends, *(ax.get_legend() for ax in fig.axes)] if legend is not None]
