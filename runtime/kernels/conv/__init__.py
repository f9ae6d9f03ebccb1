"""Conv and ConvInteger: the kernel (`conv`), its route table and geometry (`routes`: `ConvRoute`,
`ROUTES`, `ConvGeometry`, `EXAMPLES`), the routes' loops (`dense`, `depthwise`, `winograd`), the
output-over-input routes (`over`), the bound calls (`bound`), and the compiled loops they call
(`jit_conv`, `jit_phases`, `jit_winograd`, `jit_winograd4`, `jit_depthwise`, `jit_channels_last`).
"""

from runtime.kernels.conv import conv as conv  # registers Conv and ConvInteger
