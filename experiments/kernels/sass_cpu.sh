#!/usr/bin/env bash
# The SASS of the kernels without a GPU: compile each source to an sm_90a
# cubin with the build's flags, disassemble it and count the instructions of
# every loop per opcode and issue pipe (sass_loops.py).  Static counts, not
# times: what a change does to a loop's instruction mix can be checked on the
# CPU machine before a device call measures it.
#
#   bash experiments/kernels/sass_cpu.sh [--kernel SUBSTR] [--min N] [--out DIR] [SOURCE.cu ...]
#
# Sources default to kernels/gpu_ceiling.cu; kernels/moe_gpu.cu takes 12 - 20
# minutes on 2 cores.  Writes DIR/NAME.sass (the listing), DIR/NAME.ptxas
# (ptxas -v) and DIR/NAME-regs.csv (a row per kernel: registers, spills,
# stack), DIR/NAME-loops.csv (a row per loop: pipes, cycles_bound) and
# DIR/NAME-opcodes.csv (a row per loop and opcode); DIR defaults to build/sass.
#
# nvdisasm: $NVDISASM, else one on PATH or in $CUDA_HOME/bin, else the one of
# Debian's non-free nvidia-cuda-toolkit (CUDA 11.8), downloaded once into
# build/tools/ through a private apt source list (the system's is not touched;
# about 84 MB).  That nvdisasm predates the ELF header of nvcc 13's cubins, so
# the header is rewritten to the older layout first (sass_loops.py --patch-elf);
# it decodes sm_90 instructions.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
out=$root/build/sass kernel= min=16 srcs=()
usage() { sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernel=$2; shift 2 ;;
	--min) min=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	-*) echo "sass_cpu.sh: unknown option $1 (--help)" >&2; exit 2 ;;
	*) srcs+=("$1"); shift ;;
	esac
done
[ ${#srcs[@]} -gt 0 ] || srcs=(kernels/gpu_ceiling.cu)
nvcc=$cuda/bin/nvcc
[ -x "$nvcc" ] || { echo "sass_cpu.sh: no nvcc at $nvcc (set CUDA_HOME)" >&2; exit 1; }

find_nvdisasm() {
	local n
	for n in "${NVDISASM:-}" "$(command -v nvdisasm || true)" "$cuda/bin/nvdisasm" \
		"$root/build/tools/cuda-11.8/usr/bin/nvdisasm"; do
		[ -n "$n" ] && [ -x "$n" ] && { echo "$n"; return 0; }
	done
	command -v apt-get >/dev/null || { echo "sass_cpu.sh: no nvdisasm and no apt-get to fetch one" >&2; return 1; }
	local t
	t=$(mktemp -d)
	mkdir -p "$t/lists/partial" "$t/archives/partial"
	echo "deb http://deb.debian.org/debian bookworm non-free" >"$t/sources.list"
	local apt=(apt-get -qq -o Dir::Etc::SourceList="$t/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o Dir::State::Lists="$t/lists" -o Dir::Cache::archives="$t/archives" -o APT::Sandbox::User=root)
	echo "sass_cpu.sh: fetching nvdisasm (Debian non-free nvidia-cuda-toolkit, ~84 MB)" >&2
	if ! "${apt[@]}" update >&2 || ! (cd "$t" && "${apt[@]}" download nvidia-cuda-toolkit >&2); then
		echo "sass_cpu.sh: could not download nvidia-cuda-toolkit from Debian non-free" >&2
		rm -rf "$t"
		return 1
	fi
	dpkg-deb -x "$t"/nvidia-cuda-toolkit_*.deb "$t/x"
	mkdir -p "$root/build/tools/cuda-11.8/usr/bin"
	cp "$t/x/usr/bin/nvdisasm" "$root/build/tools/cuda-11.8/usr/bin/"
	rm -rf "$t"
	echo "$root/build/tools/cuda-11.8/usr/bin/nvdisasm"
}
nvdisasm=$(find_nvdisasm)
mkdir -p "$out"
arch=$(sed -n "s/^ *('cuda_arch', '[^']*', '\([^']*\)'),*/\1/p" "$root/SConstruct")
arch=${arch:-arch=compute_90a,code=sm_90a}
cd "$root"
for src in "${srcs[@]}"; do
	[ -f "$src" ] || { echo "sass_cpu.sh: no such source: $src" >&2; exit 1; }
	name=$(basename "$src" .cu)
	start=$(date +%s)
	echo "== $src: nvcc -cubin -gencode=$arch (started $(date +%H:%M:%S))" >&2
	"$nvcc" -O3 -std=c++17 -lineinfo -Ikernels -Icore/include -DSTRATA_HAVE_CUDA=1 -gencode="$arch" \
		-Xcompiler -fno-exceptions,-fno-threadsafe-statics,-fno-rtti -Xptxas -v -cubin "$src" -o "$out/$name.cubin" \
		2>"$out/$name.ptxas" || { cat "$out/$name.ptxas" >&2; exit 1; }
	echo "   compiled in $(( $(date +%s) - start )) s; registers and spills per kernel: $out/$name.ptxas" >&2
	if ! "$nvdisasm" -c "$out/$name.cubin" >"$out/$name.sass" 2>"$out/$name.err"; then
		python3 "$here/sass_loops.py" --patch-elf "$out/$name.cubin" "$out/$name.old.cubin"
		"$nvdisasm" -c "$out/$name.old.cubin" >"$out/$name.sass" 2>"$out/$name.err" ||
			{ echo "sass_cpu.sh: $nvdisasm failed on $out/$name.cubin: $(head -2 "$out/$name.err")" >&2; exit 1; }
	fi
	python3 "$here/sass_loops.py" --ptxas "$out/$name.ptxas" ${kernel:+--kernel "$kernel"} --csv "$out/$name-regs.csv"
	python3 "$here/sass_loops.py" "$out/$name.sass" ${kernel:+--kernel "$kernel"} --min "$min" \
		--csv "$out/$name-loops.csv" --opcodes "$out/$name-opcodes.csv"
	echo "   $out/$name.sass, $out/$name-regs.csv, $out/$name-loops.csv, $out/$name-opcodes.csv" >&2
done
