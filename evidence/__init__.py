"""Command-line scripts; a package so that one script can import another's functions."""
