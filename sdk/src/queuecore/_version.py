__title__ = "queuecore"
__version__ = "0.1.0"
