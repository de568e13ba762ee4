//! onionmix-frontend
