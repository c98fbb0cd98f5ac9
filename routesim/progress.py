"""Progress bars: every one a command shows is made here, so that each is drawn only
on a terminal."""


def bar(total: int, desc: str, unit: str, initial: int = 0):
    """A tqdm progress bar (``tqdm.auto``: a widget in a notebook), cleared when it
    closes. Drawn only when stderr is a terminal (tqdm's ``disable=None``): a log file
    or a pipe gets no bar, only the lines the command prints."""
    from tqdm.auto import tqdm
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False, disable=None)
