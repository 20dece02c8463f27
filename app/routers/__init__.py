"""Thin routers: parse, call one service, answer."""
