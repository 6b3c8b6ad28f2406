"""What the apt_source role writes, read back by the scenarios' tests (nvidia_repo's and
container_runtime's sources). Imported by name, like driver_state.py beside molecule/conftest.py."""


def deb822(text: str) -> dict[str, str]:
    """The fields of a one-entry deb822 .sources file (comments and blank lines skipped)."""
    fields = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            key, value = line.split(":", 1)
            fields[key.strip()] = value.strip()
    return fields
