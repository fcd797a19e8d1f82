#!/usr/bin/env python3
# Usage: python3 scripts/pngshrink.py FILE.png ..  (rewrites in place only when smaller; pixels unchanged)
# The charts plotters writes are 8-bit RGB with few colours: as palette PNGs they take about a sixth of the
# bytes, which keeps the tracked tree (carried to the GPU machine, 64 MiB at most) small.
# Lossless PNG shrink: RGB 8-bit -> palette when <= 256 colours, else recompressed; zlib level 9.
import sys, zlib, struct
def chunks(b):
    i = 8
    while i < len(b):
        n, = struct.unpack('>I', b[i:i+4]); t = b[i+4:i+8]; d = b[i+8:i+8+n]; i += 12 + n
        yield t, d
def unfilter(raw, w, h, bpp):
    stride = w * bpp; out = bytearray(); prev = bytearray(stride); i = 0
    for y in range(h):
        f = raw[i]; line = bytearray(raw[i+1:i+1+stride]); i += 1 + stride
        for x in range(stride):
            a = line[x-bpp] if x >= bpp else 0; b = prev[x]; c = prev[x-bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c; pa, pb, pc = abs(p-a), abs(p-b), abs(p-c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pr) & 255
        out += line; prev = line
    return out
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
for path in sys.argv[1:]:
    b = open(path, 'rb').read()
    cs = list(chunks(b)); ihdr = cs[0][1]
    w, h, depth, ctype = struct.unpack('>IIBB', ihdr[:10])
    if depth != 8 or ctype != 2: continue
    px = unfilter(zlib.decompress(b''.join(d for t, d in cs if t == b'IDAT')), w, h, 3)
    cols = {}
    for i in range(0, len(px), 3):
        k = bytes(px[i:i+3])
        if k not in cols:
            cols[k] = len(cols)
            if len(cols) > 256: break
    if len(cols) <= 256:
        idx = bytearray(); stride = w * 3
        for y in range(h):
            idx.append(0)
            row = px[y*stride:(y+1)*stride]
            idx += bytes(cols[bytes(row[i:i+3])] for i in range(0, stride, 3))
        out = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 3, 0, 0, 0)) + chunk(b'PLTE', b''.join(cols)) + chunk(b'IDAT', zlib.compress(bytes(idx), 9)) + chunk(b'IEND', b'')
    else:
        raw = bytearray()
        for y in range(h): raw.append(2 if y else 0); raw += px[y*w*3:(y+1)*w*3] if True else b''
        # filter 'up' computed properly:
        raw = bytearray(); prev = bytes(w*3)
        for y in range(h):
            row = px[y*w*3:(y+1)*w*3]; raw.append(2); raw += bytes((row[i] - prev[i]) & 255 for i in range(w*3)); prev = row
        out = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) + chunk(b'IDAT', zlib.compress(bytes(raw), 9)) + chunk(b'IEND', b'')
    if len(out) < len(b):
        open(path, 'wb').write(out)
    print(path, len(b), '->', min(len(out), len(b)), 'palette' if len(cols) <= 256 else 'rgb')
