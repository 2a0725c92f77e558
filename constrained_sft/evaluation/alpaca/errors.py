"""The one error of judging: what a user reads in one line when a judge cannot run as configured."""


class JudgeError(ValueError):
    """A judge that cannot run as configured (an unknown name, a missing credential, judge model or server, a flag
    the judge does not read) or whose server misbehaves (an answer of the wrong shape, rate limited to the end)."""
