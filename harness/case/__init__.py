"""One case: its layout, its concrete batch, its reference, its work and the device's ceilings."""
