"""Version of the ort-core package and of the provider contract it implements."""

__version__ = "0.2.0"

# The provider contract (hookspecs.py + types.py) is versioned apart from the package.
# A provider declares the contract version it was written for; core accepts the same major
# version with a minor version no newer than its own.
CONTRACT_VERSION = "1.1"
