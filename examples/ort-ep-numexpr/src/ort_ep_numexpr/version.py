"""Version of ort-ep-numexpr."""

__version__ = "0.2.0"
