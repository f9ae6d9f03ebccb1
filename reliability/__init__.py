"""Tools that attack memplan's service with bad input, faults and load, and measure how it holds."""
