# Shared set-up of the experiments/kernels/*_device.sh scripts (sourced).
#   dev_begin NAME       scratch directory $d, packed into $OUT/NAME.tar.gz on
#                        exit; the GPU's clocks and temperature in $d/gpu.txt
#   dev_build TARGET...  scons -j16 mode=release of the targets, log in
#                        $d/build.log; prints its time, stops the script on failure
dev_begin() {
	out=${OUT:-out}
	d=$(mktemp -d)
	mkdir -p "$out"
	trap "tar -czf '$out/$1.tar.gz' -C '$d' ." EXIT
	nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
		>"$d/gpu.txt" 2>&1
}
dev_build() {
	local t0
	t0=$(date +%s)
	scons -Q -j16 mode=release "$@" >"$d/build.log" 2>&1 || { tail -40 "$d/build.log"; exit 1; }
	echo "build $(( $(date +%s) - t0 )) s"
}
