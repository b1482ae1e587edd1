"""The daemon's life: signals, lame duck mode, configuration reload, pid and ports files."""
