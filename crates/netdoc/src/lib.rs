//! onionmix-netdoc
