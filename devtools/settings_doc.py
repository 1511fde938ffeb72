"""The lane's `general_settings` table (`litellm_fastpath.lane.settings`) as docs/settings.md
shows it: `python -m devtools.settings_doc` prints it, and a test keeps the docs equal to it."""

from __future__ import annotations

from litellm_fastpath.lane.settings import GENERAL_SETTINGS, Verdict

_VERDICTS = {Verdict.ON: "on", Verdict.OFF: "**off**", Verdict.REPRODUCED: "reproduced"}


def render() -> str:
    """One row per key, by name: its verdict, the values at which the lane stays on, why."""
    lines = [
        "| key | verdict | the lane stays on at | reason |",
        "|---|---|---|---|",
    ]
    for key in sorted(GENERAL_SETTINGS):
        setting = GENERAL_SETTINGS[key]
        values = "any value"
        if setting.inert is not None:
            values = (setting.inert.__doc__ or "").strip()
        reason = setting.reason.replace("|", "\\|")
        lines.append(f"| `{key}` | {_VERDICTS[setting.verdict]} | {values} | {reason} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
