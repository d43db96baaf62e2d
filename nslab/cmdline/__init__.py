"""Command line: the ``nslab`` commands over the layers below; errors are caught
once here and printed as one line."""
