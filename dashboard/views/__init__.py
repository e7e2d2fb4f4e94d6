"""Dashboard views, one module per area. Views parse, call one service or selector, render."""
