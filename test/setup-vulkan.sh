#!/usr/bin/env bash
# The chat engine's GPU tests run on Mesa's llvmpipe, a Vulkan device that computes on the CPU
# (ggml admits it only with GGML_VK_VISIBLE_DEVICES, which the tests set). Installs Debian's
# Vulkan loader and Mesa's drivers when missing; part of the README's test command.
set -euo pipefail
ICD_DIRS=(/usr/share/vulkan/icd.d /etc/vulkan/icd.d)
have_loader() { grep -q 'libvulkan\.so\.1 ' <<<"$(ldconfig -p 2>/dev/null)" || [ -e /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ]; } # not `ldconfig -p | grep -q`: under pipefail grep's early exit fails the pipe
have_lvp() { local d; for d in "${ICD_DIRS[@]}"; do ls "$d"/lvp_icd*.json >/dev/null 2>&1 && return 0; done; return 1; }
if have_loader && have_lvp; then exit 0; fi
echo "setup-vulkan: installing Debian's libvulkan1 and mesa-vulkan-drivers for the chat engine's Vulkan tests" >&2
PKGS=(libvulkan1 mesa-vulkan-drivers)
if [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
else
  echo "setup-vulkan: error: the Vulkan loader or Mesa's llvmpipe driver is missing; install Debian's libvulkan1 and mesa-vulkan-drivers (apt-get install libvulkan1 mesa-vulkan-drivers)" >&2
  exit 1
fi
have_loader && have_lvp || { echo "setup-vulkan: error: libvulkan.so.1 or Mesa's lvp_icd json did not install" >&2; exit 1; }
