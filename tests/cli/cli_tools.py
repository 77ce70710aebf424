"""What the command-line tests share."""


def one_line(result, code: int, *fragments) -> str:
    """The one `Error:` line of a failed command (exit `code`, no traceback), holding every fragment."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == code and len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
